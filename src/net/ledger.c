/* ledger.c: the replay ledger in SQLite (ledger.h).
 * Owns: one table, hw(key TEXT, epoch INTEGER, gen INTEGER), primary key
 * (key, epoch); the check and the raise run in one IMMEDIATE transaction.
 * Design: journal_mode=WAL and synchronous=FULL: a commit is on disk before
 * ledger_admit returns, so a generation once admitted is never admitted
 * again, whatever crashes after. Generations are stored as signed 64-bit
 * integers (SQLite's); the producer's are microseconds since 1970. */
#include "ledger.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "conn.h"

struct ledger {
    sqlite3 *db;
    pthread_mutex_t mu;
};

static int db_fail(ledger *l, sqlite3 *db, mu_err *err, const char *what) {
    return mu_fail(err, MU_E_IO, "lane: io: ledger %s: %s", what, db ? sqlite3_errmsg(db) : "cannot open");
}

int ledger_open(const char *path, ledger **out, mu_err *err) {
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return mu_fail(err, MU_E_IO, "lane: io: cannot open the ledger %s", path);
    close(fd);
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX, NULL) != SQLITE_OK) {
        int rc = db_fail(NULL, db, err, "open");
        sqlite3_close(db);
        return rc;
    }
    sqlite3_busy_timeout(db, 10000);
    char *msg = NULL;
    if (sqlite3_exec(db,
                     "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
                     "CREATE TABLE IF NOT EXISTS hw (key TEXT NOT NULL, epoch INTEGER NOT NULL, gen INTEGER NOT NULL,"
                     " PRIMARY KEY (key, epoch));",
                     NULL, NULL, &msg) != SQLITE_OK) {
        int rc = mu_fail(err, MU_E_IO, "lane: io: ledger %s: %s", path, msg ? msg : "setup failed");
        sqlite3_free(msg);
        sqlite3_close(db);
        return rc;
    }
    ledger *l = calloc(1, sizeof *l);
    if (!l) {
        sqlite3_close(db);
        return mu_fail(err, MU_E_NOMEM, "lane: out of memory");
    }
    l->db = db;
    pthread_mutex_init(&l->mu, NULL);
    *out = l;
    return 0;
}

void ledger_close(ledger *l) {
    if (!l) return;
    sqlite3_close(l->db);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

static int get_high(ledger *l, const char *key, uint32_t epoch, uint64_t *out, mu_err *err) {
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(l->db, "SELECT gen FROM hw WHERE key = ?1 AND epoch = ?2", -1, &st, NULL) != SQLITE_OK)
        return db_fail(l, l->db, err, "query");
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, epoch);
    int r = sqlite3_step(st);
    *out = r == SQLITE_ROW ? (uint64_t)sqlite3_column_int64(st, 0) : 0;
    sqlite3_finalize(st);
    if (r != SQLITE_ROW && r != SQLITE_DONE) return db_fail(l, l->db, err, "query");
    return 0;
}

int ledger_high(ledger *l, const uint8_t key_id[32], uint32_t epoch, uint64_t *out, mu_err *err) {
    char key[65];
    lane_hex(key_id, key);
    pthread_mutex_lock(&l->mu);
    int rc = get_high(l, key, epoch, out, err);
    pthread_mutex_unlock(&l->mu);
    return rc;
}

int ledger_admit(ledger *l, const uint8_t key_id[32], uint32_t epoch, uint64_t generation, mu_err *err) {
    if (generation == 0 || generation > (uint64_t)INT64_MAX)
        return mu_fail(err, MU_E_STATE, "lane: stale: generation %llu is out of range", (unsigned long long)generation);
    char key[65];
    lane_hex(key_id, key);
    pthread_mutex_lock(&l->mu);
    int rc = 0;
    uint64_t hw = 0;
    if (sqlite3_exec(l->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) {
        rc = db_fail(l, l->db, err, "begin");
        goto out;
    }
    if ((rc = get_high(l, key, epoch, &hw, err))) goto rollback;
    if (generation <= hw) {
        rc = mu_fail(err, MU_E_STATE, "lane: stale: generation %llu is not above the ledger's %llu for this node and epoch %u",
                     (unsigned long long)generation, (unsigned long long)hw, epoch);
        goto rollback;
    }
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(l->db, "INSERT OR REPLACE INTO hw (key, epoch, gen) VALUES (?1, ?2, ?3)", -1, &st, NULL) !=
        SQLITE_OK) {
        rc = db_fail(l, l->db, err, "update");
        goto rollback;
    }
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, epoch);
    sqlite3_bind_int64(st, 3, (sqlite3_int64)generation);
    int r = sqlite3_step(st);
    sqlite3_finalize(st);
    if (r != SQLITE_DONE) {
        rc = db_fail(l, l->db, err, "update");
        goto rollback;
    }
    if (sqlite3_exec(l->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
        rc = db_fail(l, l->db, err, "commit");
        goto rollback;
    }
    goto out;
rollback:
    sqlite3_exec(l->db, "ROLLBACK", NULL, NULL, NULL);
out:
    pthread_mutex_unlock(&l->mu);
    return rc;
}
