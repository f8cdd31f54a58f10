/* ledger.h: the decoder's durable replay ledger (docs/lane.md "Replay"):
 * the high-water generation per (node key, key epoch), in SQLite (WAL,
 * synchronous=FULL), so a replayed, stale or reordered handoff is refused
 * also after a restart.
 * Owns: the database file. Does not own: what a generation is for. */
#ifndef MU_NET_LEDGER_H
#define MU_NET_LEDGER_H

#include <stdint.h>

#include "../base/err.h"

typedef struct ledger ledger;
/* Opens (creating, mode 0600) the ledger at path. */
int ledger_open(const char *path, ledger **out, mu_err *err);
void ledger_close(ledger *l);
/* Admits generation for (key_id, epoch) when it is above the high-water
 * mark, and durably raises the mark to it before returning 0; otherwise
 * MU_E_STATE "lane: stale: ...". Thread-safe. */
int ledger_admit(ledger *l, const uint8_t key_id[32], uint32_t epoch, uint64_t generation, mu_err *err);
/* The high-water mark (0 when none). */
int ledger_high(ledger *l, const uint8_t key_id[32], uint32_t epoch, uint64_t *out, mu_err *err);

#endif
