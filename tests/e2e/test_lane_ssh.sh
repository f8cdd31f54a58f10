#!/usr/bin/env bash
# test_lane_ssh.sh: `muser node add NAME USER@HOST` (docs/lane.md) against a
# private sshd on loopback (its own host key, an authorized key in a temp
# directory, BatchMode): the producer started over ssh, enrolled and
# qualified, then used by `run --prefill remote`; a login that fails, a
# producer that cannot start and a name already registered are refused
# with their reason and register nothing. Skipped when sshd, ssh or
# ssh-keygen is absent or sshd cannot start here (it needs root for its
# privilege separation; tools/install-deps.sh does not install it).
set -u
cd "$(dirname "$0")/../.."
MUSER=${MUSER_BIN:-$PWD/muser}
[ -x "$MUSER" ] || { echo "test_lane_ssh: skipped: no muser binary at $MUSER"; exit 0; }
SSHD=$(command -v sshd || echo /usr/sbin/sshd)
for b in "$SSHD" ssh ssh-keygen; do
  command -v "$b" >/dev/null 2>&1 || { echo "test_lane_ssh: skipped: no $b (apt-get install openssh-server)"; exit 0; }
done
T=$(mktemp -d)
PIDS=()
REMOTE_PIDS=()
cleanup() {
  for p in "${REMOTE_PIDS[@]}"; do kill "$p" 2>/dev/null; done
  [ -f "$T/ssh/sshd.pid" ] && kill "$(cat "$T/ssh/sshd.pid")" 2>/dev/null
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null; rm -rf "$T"
}
trap cleanup EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }
export MUSER_HOME=$T/dec
USER_=$(id -un)

mkdir -p "$T/ssh" && chmod 700 "$T/ssh"
ssh-keygen -q -t ed25519 -N '' -f "$T/ssh/host_key" && ssh-keygen -q -t ed25519 -N '' -f "$T/ssh/id" \
  && ssh-keygen -q -t ed25519 -N '' -f "$T/ssh/other" && cp "$T/ssh/id.pub" "$T/ssh/authorized_keys" || { bad "ssh-keygen"; exit 1; }
SPORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$T/ssh/sshd_config" <<EOF
Port $SPORT
ListenAddress 127.0.0.1
HostKey $T/ssh/host_key
AuthorizedKeysFile $T/ssh/authorized_keys
PidFile $T/ssh/sshd.pid
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
EOF
for k in id other; do
  cat >"$T/ssh/config-$k" <<EOF
Host *
  IdentityFile $T/ssh/$k
  IdentitiesOnly yes
  UserKnownHostsFile $T/ssh/known_hosts
  StrictHostKeyChecking accept-new
  Port $SPORT
EOF
done
[ "$(id -u)" = 0 ] && mkdir -p /run/sshd 2>/dev/null
"$SSHD" -f "$T/ssh/sshd_config" -D -e 2>"$T/ssh/sshd.log" &
PIDS+=($!)
up=0
for _ in $(seq 100); do
  ssh -F "$T/ssh/config-id" -o BatchMode=yes "$USER_@127.0.0.1" true 2>/dev/null && { up=1; break; }
  kill -0 "${PIDS[0]}" 2>/dev/null || break
  sleep 0.1
done
[ $up = 1 ] || { echo "test_lane_ssh: skipped: the private sshd did not start here: $(tail -2 "$T/ssh/sshd.log" | tr '\n' ' ')"; exit 0; }

"$MUSER" gen -o "$T/m.gguf" --preset tiny --type q8_0 --seed 3 2>/dev/null || { bad "gen"; exit 1; }
ids() { python3 -c "import sys; print(','.join(str((i * 37 + int(sys.argv[2])) % 1000) for i in range(int(sys.argv[1]))))" "$1" "$2"; }
add() { # add NAME CONFIG [extra]: node add over ssh with the test's remote options
  local name=$1 cfg=$2; shift 2
  "$MUSER" node add "$name" "$USER_@127.0.0.1" --ssh-config "$T/ssh/$cfg" --remote-muser "$MUSER" \
    --remote-listen 127.0.0.1:0 --remote-home "$T/node" --remote-backend cpu -m "$T/m.gguf" --qualify-tokens 300 "$@"
}

# ---- the producer started over ssh, enrolled, qualified, used ----------------------------
if add lane config-id >"$T/add.out" 2>&1; then
  grep -q "node lane: producer started on $USER_@127.0.0.1 (pid [0-9]* there" "$T/add.out" \
    && [ "$(grep -c 'rows and logits bit-identical' "$T/add.out")" = 3 ] && grep -q 'node lane: healthy' "$T/add.out" \
    && ok "node add USER@HOST: the producer started over ssh (BatchMode), enrolled and qualified" || bad "add output: $(cat "$T/add.out")"
else bad "node add over ssh: $(cat "$T/add.out")"; fi
RP=$(sed -n 's/.*(pid \([0-9]*\) there.*/\1/p' "$T/add.out")
[ -n "$RP" ] && REMOTE_PIDS+=("$RP")
[ -n "$RP" ] && kill -0 "$RP" 2>/dev/null && grep -q '^muser-enroll-token: ' "$T/node/producer-lane.out" \
  && [ "$(stat -c %a "$T/node/producer-lane.err")" = 600 ] \
  && ok "the producer keeps running after ssh returns; its output in the node's muser home (0600)" || bad "remote producer $RP"
P=$(ids 700 11)
"$MUSER" run -m "$T/m.gguf" --prompt-ids "$P" --temp 0 --json --top 5 -n 8 >"$T/l" 2>/dev/null
"$MUSER" run -m "$T/m.gguf" --prompt-ids "$P" --temp 0 --json --top 5 -n 8 --prefill remote --node lane >"$T/r" 2>"$T/re" \
  && grep -q '512 prompt tokens prefilled by the node' "$T/re" && cmp -s "$T/l" "$T/r" \
  && ok "run --prefill remote through the node added over ssh: equal to local" || bad "remote run: $(cat "$T/re")"

# ---- refusals: nothing registered, no producer left behind ----------------------------------
out=$(add lane config-id 2>&1) && bad "a registered name was added again" \
  || { echo "$out" | grep -q 'lane is registered already' && ! echo "$out" | grep -q 'producer started' \
    && ok "a registered name is refused before anything starts on the node" || bad "re-add: $out"; }
out=$(add other config-other 2>&1) && bad "an unauthorized key logged in" \
  || { echo "$out" | grep -q 'node: ssh: cannot log in' && [ ! -f "$MUSER_HOME/lane/nodes/other.json" ] \
    && ok "a key the node does not authorize: refused (BatchMode, no prompt), nothing registered: ${out##*: node: }" || bad "bad key: $out"; }
out=$(add broken config-id --remote-model "$T/absent.gguf" 2>&1) && bad "a producer without its model was enrolled" \
  || { echo "$out" | grep -q 'node: the producer on .* did not start' && [ ! -f "$MUSER_HOME/lane/nodes/broken.json" ] \
    && ok "a producer that cannot start on the node: its reason, nothing registered: ${out##*: node: }" || bad "broken: $out"; }
out=$("$MUSER" node add x "-oProxyCommand=evil@h" -m "$T/m.gguf" 2>&1) && bad "an option as the ssh destination" \
  || { echo "$out" | grep -q "USER@HOST wanted\|unknown option '-oProxyCommand" && ok "a destination that looks like an ssh option never reaches ssh: $out" \
    || bad "option destination: $out"; }
exit $fail
