/* lane.c: what the prefill lane's two ends share (include/muser_lane.h,
 * docs/lane.md): files under the muser home, this end's certificate, the
 * node key and its id, the enrollment token, a model's layer plan, the
 * local CA's API. The producer is lane_producer.c, the decoder's fetch and
 * install lane_decoder.c, enrollment, qualification and the registry
 * lane_node.c; src/gen/lane.h joins them.
 * Owns: what a handoff means for sessions and models; the registry files.
 * Does not own: bytes on the wire (src/net/lanewire.c), TLS and sockets
 * (src/net/conn.c), the ledger (src/net/ledger.c), the identity digests
 * (src/kv/kvengine.c).
 * Design: the decoder ships to the producer the prompt's whole steps
 * before its last token (step = its scheduler's prefill chunk; another
 * kernel class: all tokens but the last), so the producer runs exactly the
 * forwards the decoder would have run and the decoder computes exactly its
 * own last step: the committed rows and the logits are bit-identical to
 * local prefill on the same kernel class. The producer streams each step's
 * rows of every layer as soon as that step's forward is done, from a sender
 * thread, while it computes the next step. The decoder keeps every row in a
 * detached shadow (plain memory, not a session) until the SEAL verifies and
 * the ledger admits the generation; only then may the slot install it, in
 * one go, on the engine thread. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "lane.h"

double mu_lane_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ---- files under the muser home ------------------------------------------- */

int mu_lane_home_sub(char *out, size_t cap, const char *sub, mu_err *err) {
    char home[PATH_MAX - 64];
    int rc = mu_kv_home(home, sizeof home, true, err);
    if (rc) return rc;
    snprintf(out, cap, "%s/%s", home, sub);
    if (mkdir(out, 0700) && errno != EEXIST) return mu_fail(err, MU_E_IO, "lane: cannot create %s: %s", out, strerror(errno));
    return 0;
}

int mu_tls_dir(char *out, size_t cap, mu_err *err) { return mu_lane_home_sub(out, cap, "tls", err); }
int mu_tls_init(const char *dir, mu_err *err) { return tls_ca_init(dir, err); }
int mu_tls_issue(const char *dir, const char *name, const char *san, mu_err *err) { return tls_issue(dir, name, san, err); }
int mu_tls_fingerprint(const char *cert, char out[65], mu_err *err) {
    uint8_t fp[32];
    int rc = tls_cert_fp(cert, fp, err);
    if (!rc) lane_hex(fp, out);
    return rc;
}

/* This end's certificate <home>/tls/NAME.{pem,key}: made (with the CA when
 * there is none) on first use. */
int mu_lane_own_cert(const char *name, const char *san, char *cert, char *key, size_t cap, uint8_t fp[32], mu_err *err) {
    char dir[PATH_MAX - 64], ca[PATH_MAX];
    int rc = mu_tls_dir(dir, sizeof dir, err);
    if (rc) return rc;
    snprintf(ca, sizeof ca, "%s/ca.pem", dir);
    snprintf(cert, cap, "%s/%s.pem", dir, name);
    snprintf(key, cap, "%s/%s.key", dir, name);
    struct stat st;
    if (stat(ca, &st) && (rc = tls_ca_init(dir, err))) return rc;
    if (stat(cert, &st) && (rc = tls_issue(dir, name, san, err))) return rc;
    return tls_cert_fp(cert, fp, err);
}

int mu_lane_write_private(const char *path, const char *text, mu_err *err) {
    char tmp[PATH_MAX + 16];
    snprintf(tmp, sizeof tmp, "%s.tmp%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return mu_fail(err, MU_E_IO, "lane: cannot write %s: %s", tmp, strerror(errno));
    size_t n = strlen(text);
    bool ok = write(fd, text, n) == (ssize_t)n && !fsync(fd);
    close(fd);
    if (!ok || rename(tmp, path)) {
        unlink(tmp);
        return mu_fail(err, MU_E_IO, "lane: cannot write %s", path);
    }
    return 0;
}

/* The node key: HMAC-SHA-256(secret, "muser/lane/v1/node-key" 0 producer_fp decoder_fp). */
void mu_lane_derive_key(const uint8_t secret[32], const uint8_t pfp[32], const uint8_t dfp[32], uint8_t key[32]) {
    uint8_t both[64];
    memcpy(both, pfp, 32);
    memcpy(both + 32, dfp, 32);
    lane_hmac(secret, "muser/lane/v1/node-key", both, 64, key);
}

void mu_lane_key_id(const uint8_t key[32], uint8_t out[32]) {
    uint8_t b[64];
    static const char d[] = "muser/lane/v1/key-id";
    memcpy(b, key, 32);
    lane_sha256(d, sizeof d, b + 32);
    lane_sha256(b, 64, out);
    OPENSSL_cleanse(b, sizeof b);
}

/* ---- tokens: "mut1." base64url(secret 32 | producer fp 32 | expiry u64 LE) --- */

static void b64url(const uint8_t *p, size_t n, char *out) {
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    size_t k = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        out[k++] = A[v >> 18 & 63];
        out[k++] = A[v >> 12 & 63];
        if (i + 1 < n) out[k++] = A[v >> 6 & 63];
        if (i + 2 < n) out[k++] = A[v & 63];
    }
    out[k] = 0;
}

static bool unb64url(const char *s, uint8_t *out, size_t n) {
    size_t len = strlen(s), k = 0;
    if (len != (n * 4 + 2) / 3) return false;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < len; i++) {
        const char c = s[i];
        int v = c >= 'A' && c <= 'Z' ? c - 'A' : c >= 'a' && c <= 'z' ? c - 'a' + 26 : c >= '0' && c <= '9' ? c - '0' + 52
              : c == '-' ? 62 : c == '_' ? 63 : -1;
        if (v < 0) return false;
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (k < n) out[k++] = (uint8_t)(acc >> bits);
        }
    }
    return k == n;
}

void mu_lane_token_text(const enroll_token *t, char out[160]) {
    uint8_t b[72];
    memcpy(b, t->secret, 32);
    memcpy(b + 32, t->fp, 32);
    for (int i = 0; i < 8; i++) b[64 + i] = (uint8_t)(t->expiry >> (8 * i));
    memcpy(out, "mut1.", 5);
    b64url(b, sizeof b, out + 5);
    OPENSSL_cleanse(b, sizeof b);
}

int mu_lane_token_parse(const char *s, enroll_token *t, mu_err *err) {
    uint8_t b[72];
    if (strncmp(s, "mut1.", 5) || !unb64url(s + 5, b, sizeof b))
        return mu_fail(err, MU_E_ARG, "lane: auth: not an enrollment token (mut1.<96 characters>)");
    memcpy(t->secret, b, 32);
    memcpy(t->fp, b + 32, 32);
    t->expiry = 0;
    for (int i = 0; i < 8; i++) t->expiry |= (uint64_t)b[64 + i] << (8 * i);
    OPENSSL_cleanse(b, sizeof b);
    if ((uint64_t)time(NULL) > t->expiry) return mu_fail(err, MU_E_STATE, "lane: auth: the enrollment token has expired");
    return 0;
}

/* ---- the model's layer plan ----------------------------------------------------- */

/* m->n_ship and m->n_have set: the layer table, row size and chunk count. */
void mu_lane_plan(const mu_model *m, lane_manifest *mf) {
    const mu_model_info *I = mu_model_get_info(m);
    lane_layers_plan(mf, I->n_layer, I->swa_layers, I->n_swa);
    mf->row_bytes = (uint32_t)(I->n_head_kv * I->head_dim * 2);
    mf->n_chunks = lane_chunk_count(mf);
}

