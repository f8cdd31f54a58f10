#!/usr/bin/env bash
# test_bench.sh: `muser bench` end to end on a generated tiny model: the text
# and --json reports (one object per depth, every field the docs promise, the
# greedy ids and decode steps consistent, the weight bytes per step those of
# the file's tensors minus the token embedding), --profile's phase timers
# (present, within the decode step, one timing per decode step), the same
# ids across kernel tables and runs, and bad options (exit 1, one line on
# stderr).
set -u
cd "$(dirname "$0")/../.."
MUSER=${MUSER_BIN:-$PWD/muser}
[ -x "$MUSER" ] || { echo "test_bench: skipped: no muser binary at $MUSER"; exit 0; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }

"$MUSER" gen -o "$T/tiny.gguf" --preset tiny --seed 7 2>"$T/err" || { bad "gen: $(cat "$T/err")"; exit 1; }

if "$MUSER" bench -m "$T/tiny.gguf" --depths 16,40 --gen 6 --threads 2 --json >"$T/j" 2>"$T/err"; then
  if python3 - "$T/j" "$T/tiny.gguf" "$MUSER" <<'EOF'
import json, sys, subprocess
lines = [json.loads(l) for l in open(sys.argv[1])]
assert [l["depth"] for l in lines] == [16, 40], lines
keys = {"model", "depth", "gen", "prefill_s", "decode_s", "prefill_tps", "decode_tokens", "decode_tps",
        "peak_rss_mib", "step_weight_bytes", "decode_weight_gbps", "backend", "kern", "threads", "ubatch", "reps",
        "commit", "ids"}
for l in lines:
    assert keys <= set(l), keys - set(l)
    assert l["threads"] == 2 and l["gen"] == 6 and l["reps"] == 1
    assert 1 <= l["decode_tokens"] <= 6 and len(l["ids"]) == l["decode_tokens"], l
    assert l["prefill_s"] > 0 and l["decode_s"] > 0 and l["peak_rss_mib"] > 0
    assert abs(l["prefill_tps"] - l["depth"] / l["prefill_s"]) <= 0.01 * l["prefill_tps"] + 0.01
    assert abs(l["decode_weight_gbps"] - l["decode_tokens"] * l["step_weight_bytes"] / l["decode_s"] / 1e9) \
        <= 0.01 * l["decode_weight_gbps"] + 0.01
# weights per step: every tensor but token_embd (the tiny preset has an output tensor)
out = subprocess.run([sys.argv[3], "info", "-m", sys.argv[2], "--tensors"],
                     capture_output=True, text=True).stdout
sizes = {ln.split()[1]: int(ln.split()[-2]) for ln in out.splitlines() if ln.startswith("tensor ")}
assert "output.weight" in sizes, "tiny preset without output.weight"
want = sum(sizes.values()) - sizes["token_embd.weight"]
assert all(l["step_weight_bytes"] == want for l in lines), (want, lines[0]["step_weight_bytes"])
EOF
  then ok "bench --json: 2 depths, fields, ids, weight bytes per step"; else bad "bench --json report"; fi
else bad "bench --json failed: $(cat "$T/err")"; fi

# the text report: header, one line per depth
if "$MUSER" bench -m "$T/tiny.gguf" --depths 24 --gen 4 --threads 1 >"$T/t" 2>"$T/err" &&
  grep -q '^backend cpu, kern .*threads 1, ubatch 512, commit ' "$T/t" &&
  grep -q 'MB of weights read per decode step' "$T/t" &&
  grep -Eq '^depth +24: prefill +[0-9.]+ tok/s .* decode +[0-9.]+ tok/s .*GB/s\)   peak RSS [0-9]+ MiB$' "$T/t"; then
  ok "bench text report"
else bad "bench text report: $(cat "$T/t" "$T/err")"; fi

# --profile: the phase timers lie inside the decode steps. A step's phases are
# timed on the engine thread within the interval the step's time is measured
# over, with the same clock, so their sum never exceeds it (5% and 1 us for
# the printed rounding). No lower bound: the time between the timed phases
# (sampling, events) grows without limit when the machine preempts the engine
# thread there, so "the phases cover X% of the step" would depend on how busy
# the machine is; the text table's count of timed decode steps (below) shows
# instead that every step was timed.
if "$MUSER" bench -m "$T/tiny.gguf" --depths 40 --gen 6 --threads 2 --profile --json >"$T/p" 2>"$T/err" &&
  python3 - "$T/p" <<'EOF'
import json, sys
l = json.loads(open(sys.argv[1]).readline())
phases = ["norms", "qkv", "rope", "attn", "wo", "ffn_up", "ffn_down", "logits"]
d, p = l["profile_decode_ms_per_step"], l["profile_prefill_ms_per_token"]
assert list(d) == phases and list(p) == phases, (d, p)
assert all(v >= 0 for v in d.values()) and all(v >= 0 for v in p.values())
step_ms = l["decode_s"] / l["decode_tokens"] * 1e3
assert 0 < sum(d.values()) <= 1.05 * step_ms + 0.001, (sum(d.values()), step_ms)
assert d["qkv"] > 0 and d["ffn_up"] > 0 and p["qkv"] > 0 and p["logits"] >= 0
EOF
then ok "bench --profile: phases present, their sum within the decode step"
else bad "bench --profile: $(cat "$T/p" "$T/err")"; fi
# the text table: 8 phases and a total over as many timed decode steps as the
# depth line reports decoded tokens
if "$MUSER" bench -m "$T/tiny.gguf" --depths 24 --gen 4 --profile >"$T/t" 2>"$T/err" &&
  [ "$(grep -c '^  profile ' "$T/t")" = 10 ] && grep -q '^  profile total ' "$T/t" &&
  n_dec=$(sed -nE 's/^depth .* decode .*\(.* s, ([0-9]+) tokens.*/\1/p' "$T/t") && [ -n "$n_dec" ] &&
  grep -Eq "^  profile total .*\(${n_dec} decode steps\)$" "$T/t"; then
  ok "bench --profile text table ($n_dec decode steps timed, as many as decoded)"
else bad "bench --profile text: $(cat "$T/t" "$T/err")"; fi

# greedy ids do not depend on the kernel table or the thread count
ids() { "$MUSER" bench -m "$T/tiny.gguf" --depths 40 --gen 6 --json "$@" 2>/dev/null | python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["ids"])'; }
a=$(ids --threads 2); b=$(ids --threads 1 --kern ref)
if [ -n "$a" ] && [ "$a" = "$b" ]; then ok "same ids with 2 threads and with the ref table, 1 thread"; else bad "ids differ: '$a' vs '$b'"; fi
# --parallel 3: three slots decode in the same steps; slot 0's ids are the
# single slot's, and the tokens are counted over all slots
p=$("$MUSER" bench -m "$T/tiny.gguf" --depths 40 --gen 6 --json --parallel 3 2>/dev/null | python3 -c '
import json,sys; l = json.loads(sys.stdin.readline()); print(l["ids"], l["decode_tokens"], l["parallel"])')
if [ "$p" = "$a 18 3" ]; then ok "bench --parallel 3: slot 0's ids as one slot's, 18 tokens"; else bad "bench --parallel 3: '$p' vs '$a 18 3'"; fi

# bad options: exit 1 with one line on stderr, nothing on stdout
for args in "--depths 0" "--depths 16,x" "--gen 0" "--threads -1" "--depths 16 --kern nosuch" "--depths 200000" "--parallel 9" "--bogus"; do
  # shellcheck disable=SC2086
  "$MUSER" bench -m "$T/tiny.gguf" $args >"$T/o" 2>"$T/e"
  rc=$?
  if [ $rc = 1 ] && [ "$(wc -l <"$T/e")" = 1 ] && [ ! -s "$T/o" ]; then ok "bench $args: exit 1, $(cat "$T/e")"
  else bad "bench $args: rc $rc, stderr '$(cat "$T/e")', stdout '$(head -c 200 "$T/o")'"; fi
done
"$MUSER" bench -m "$T/missing.gguf" >"$T/o" 2>"$T/e"
if [ $? = 1 ] && [ "$(wc -l <"$T/e")" = 1 ]; then ok "missing model: $(cat "$T/e")"; else bad "missing model: $(cat "$T/e")"; fi

exit $fail
