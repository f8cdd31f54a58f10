/* node_ssh.h: starting a producer over the system ssh for `muser node add
 * NAME USER@HOST` (node_ssh.c, docs/lane.md). */
#ifndef MU_CMD_NODE_SSH_H
#define MU_CMD_NODE_SSH_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    const char *target;         /* USER@HOST */
    const char *name;           /* the node's name (its output files on the node) */
    const char *ssh_config;     /* ssh -F FILE (NULL: the user's) */
    const char *ssh_port;       /* ssh -p PORT (NULL: the config's) */
    const char *remote_muser;   /* the muser binary on the node ("muser": its PATH) */
    const char *remote_model;   /* the GGUF on the node */
    const char *remote_listen;  /* the producer's --listen */
    const char *remote_backend; /* the producer's --backend */
    const char *remote_home;    /* MUSER_HOME on the node (NULL: its default) */
    int wait_s;                 /* how long the producer may take to listen */
} node_ssh_opts;

/* True when addr names an ssh destination (USER@HOST), not HOST:PORT. */
bool node_ssh_is_target(const char *addr);
/* Starts `muser producer --enroll` on the node; fills addr (HOST:PORT to
 * enroll with), token and the producer's pid there. Returns 0, or 1 after
 * printing the error line. */
int node_ssh_start(const node_ssh_opts *o, char *addr, size_t addr_cap, char *token, size_t token_cap, long *pid);
/* Stops the producer pid on the node (after a failed enrollment). */
void node_ssh_stop(const node_ssh_opts *o, long pid);

#endif
