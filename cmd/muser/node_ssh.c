/* node_ssh.c: `muser node add NAME USER@HOST` (docs/lane.md): starts the
 * producer on the node over the system ssh and reads its enrollment token.
 * Owns: the ssh command line, the remote shell command (every value
 * single-quoted), reading the producer's first lines back, stopping it
 * again when the enrollment fails.
 * Does not own: enrollment and qualification (mu_node_add does them with
 * the token this returns, exactly as for HOST:PORT).
 * Design: ssh runs with BatchMode=yes (never a password prompt) and its
 * argv built here, no local shell; on the node, one POSIX sh command
 * starts `muser producer --enroll` under nohup with its output in files
 * under the node's muser home, waits until the token line is there (or the
 * producer died) and prints the token, the listening line and the pid. The
 * producer keeps running after ssh returns. */
#include "node_ssh.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

extern char **environ;

/* s single-quoted for sh into out (false when it does not fit). */
static bool quote(const char *s, char *out, size_t cap) {
    size_t k = 0;
    if (k + 1 >= cap) return false;
    out[k++] = '\'';
    for (; *s; s++) {
        const char *piece = *s == '\'' ? "'\\''" : NULL;
        size_t n = piece ? 4 : 1;
        if (k + n + 2 >= cap) return false;
        if (piece) memcpy(out + k, piece, 4);
        else out[k] = *s;
        k += n;
    }
    out[k++] = '\'';
    out[k] = 0;
    return true;
}

bool node_ssh_is_target(const char *addr) { return strchr(addr, '@') != NULL; }

/* Runs argv (ssh ...) and collects its stdout (at most cap - 1 bytes) until
 * it exits or timeout_s passes; returns its exit status, -1 on a failure to
 * start it or a timeout (then *why says which). */
static int run_capture(char *const argv[], char *out, size_t cap, int timeout_s, char *why, size_t wcap) {
    int fd[2];
    if (pipe2(fd, O_CLOEXEC)) {
        snprintf(why, wcap, "pipe: %s", strerror(errno));
        return -1;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fd[1], 1);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fd[1]);
    if (rc) {
        close(fd[0]);
        snprintf(why, wcap, "cannot run %s: %s", argv[0], strerror(rc));
        return -1;
    }
    size_t n = 0;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    bool timed_out = false;
    for (;;) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        long left_ms = timeout_s * 1000L - ((t.tv_sec - t0.tv_sec) * 1000L + (t.tv_nsec - t0.tv_nsec) / 1000000L);
        if (left_ms <= 0) {
            timed_out = true;
            break;
        }
        struct pollfd p = {.fd = fd[0], .events = POLLIN};
        if (poll(&p, 1, (int)(left_ms > 1000 ? 1000 : left_ms)) < 0 && errno != EINTR) break;
        if (!p.revents) continue;
        char buf[512];
        ssize_t r = read(fd[0], buf, sizeof buf);
        if (r <= 0) break;
        size_t take = (size_t)r < cap - 1 - n ? (size_t)r : cap - 1 - n;
        memcpy(out + n, buf, take);
        n += take;
    }
    out[n] = 0;
    close(fd[0]);
    if (timed_out) kill(pid, SIGTERM);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (timed_out) {
        snprintf(why, wcap, "ssh did not finish within %d s", timeout_s);
        return -1;
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* ssh's argv for the destination and one remote command. */
static void ssh_argv(const node_ssh_opts *o, const char *remote, const char *argv[16]) {
    int k = 0;
    argv[k++] = "ssh";
    argv[k++] = "-o";
    argv[k++] = "BatchMode=yes";
    argv[k++] = "-o";
    argv[k++] = "ConnectTimeout=30";
    if (o->ssh_config) {
        argv[k++] = "-F";
        argv[k++] = o->ssh_config;
    }
    if (o->ssh_port) {
        argv[k++] = "-p";
        argv[k++] = o->ssh_port;
    }
    argv[k++] = o->target;
    argv[k++] = remote;
    argv[k] = NULL;
}

int node_ssh_start(const node_ssh_opts *o, char *addr, size_t addr_cap, char *token, size_t token_cap, long *pid) {
    const char *at = strrchr(o->target, '@');
    if (!at || at == o->target || !at[1] || strchr(at + 1, ':') || o->target[0] == '-')
        return cli_fail("muser node add: USER@HOST wanted (the ssh port goes in --ssh-port): %s", o->target);
    char qm[1200], qmodel[4200], qlisten[300], qhome[4200], qname[200], qback[64];
    if (!quote(o->remote_muser, qm, sizeof qm) || !quote(o->remote_model, qmodel, sizeof qmodel) ||
        !quote(o->remote_listen, qlisten, sizeof qlisten) || !quote(o->name, qname, sizeof qname) ||
        !quote(o->remote_backend, qback, sizeof qback) || !quote(o->remote_home ? o->remote_home : "", qhome, sizeof qhome))
        return cli_fail("muser node add: a remote path is too long");
    /* d: the node's muser home; the producer's output goes to d/producer-NAME.{out,err} */
    char *remote = malloc(16384);
    if (!remote) return cli_fail("muser node add: out of memory");
    snprintf(remote, 16384,
             "umask 077; h=%s; if [ -n \"$h\" ]; then MUSER_HOME=$h; export MUSER_HOME; fi; "
             "d=${MUSER_HOME:-$HOME/.muser}; mkdir -p \"$d\" || exit 3; n=%s; "
             "nohup %s producer -m %s --listen %s --enroll --backend %s >\"$d/producer-$n.out\" "
             "2>\"$d/producer-$n.err\" </dev/null & p=$!; i=0; "
             "while [ $i -lt %d ]; do grep -q '^muser-enroll-token: ' \"$d/producer-$n.out\" && break; "
             "kill -0 $p 2>/dev/null || break; sleep 0.2; i=$((i+1)); done; "
             "echo \"muser-pid: $p\"; cat \"$d/producer-$n.out\"; grep ' on ' \"$d/producer-$n.err\" | head -n 1; "
             "if ! kill -0 $p 2>/dev/null; then echo 'muser-failed:'; tail -n 3 \"$d/producer-$n.err\"; fi",
             qhome, qname, qm, qmodel, qlisten, qback, o->wait_s * 5);
    const char *argv[16];
    ssh_argv(o, remote, argv);
    char out[8192], why[300] = "";
    int st = run_capture((char *const *)argv, out, sizeof out, o->wait_s + 60, why, sizeof why);
    free(remote);
    if (st < 0) return cli_fail("muser node add: node: ssh: %s", why);
    if (st == 255) return cli_fail("muser node add: node: ssh: cannot log in to %s (BatchMode: a key, no password)", o->target);
    if (st) return cli_fail("muser node add: node: ssh: the remote command failed (exit %d)", st);
    char *p = strstr(out, "muser-pid: ");
    *pid = p ? strtol(p + 11, NULL, 10) : 0;
    /* the producer's first line: "muser producer: MODEL on HOST:PORT (backend ..." */
    char *t = strstr(out, "muser-enroll-token: "), *bk = strstr(out, " (backend "), *on = NULL;
    for (char *c = out; bk && (c = strstr(c, " on ")) && c < bk; c++) on = c;
    if (strstr(out, "muser-failed:") || !t || !on || *pid <= 0) {
        char *f = strstr(out, "muser-failed:");
        char msg[400];
        snprintf(msg, sizeof msg, "%.390s", f ? f + 13 : out);
        for (char *c = msg; *c; c++)
            if (*c == '\n') *c = ' ';
        return cli_fail("muser node add: node: the producer on %s did not start: %s", o->target, msg);
    }
    t += 20;
    size_t tl = strcspn(t, "\r\n");
    if (tl + 1 > token_cap) return cli_fail("muser node add: node: the token from %s is too long", o->target);
    memcpy(token, t, tl);
    token[tl] = 0;
    /* " on LISTEN_HOST:PORT " from the producer's first line: the port; the host is the ssh host */
    const char *hp = on + 4, *sp = strchr(hp, ' ');
    const char *colon = NULL;
    for (const char *c = hp; c < (sp ? sp : hp + strlen(hp)); c++)
        if (*c == ':') colon = c;
    long long port;
    char pbuf[16] = "";
    if (colon && sp && sp - colon - 1 < (long)sizeof pbuf) memcpy(pbuf, colon + 1, (size_t)(sp - colon - 1));
    if (!colon || !cli_int(pbuf, 1, 65535, &port))
        return cli_fail("muser node add: node: no port in the producer's line from %s", o->target);
    const char *host = at + 1;
    if (strchr(host, ':')) snprintf(addr, addr_cap, "[%s]:%lld", host, port);
    else snprintf(addr, addr_cap, "%s:%lld", host, port);
    return 0;
}

void node_ssh_stop(const node_ssh_opts *o, long pid) {
    if (pid <= 0) return;
    char cmd[64], out[256], why[200];
    snprintf(cmd, sizeof cmd, "kill %ld", pid);
    const char *argv[16];
    ssh_argv(o, cmd, argv);
    run_capture((char *const *)argv, out, sizeof out, 60, why, sizeof why);
}
