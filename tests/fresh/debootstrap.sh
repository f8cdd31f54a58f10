#!/usr/bin/env bash
# debootstrap.sh: the set-up proof of issue 16, the "fresh" tier (slow, not in
# the default tiers; `bash tests/run.sh fresh`). Makes a Debian 12 chroot
# with debootstrap (minbase plus make: the README's commands need make),
# copies the committed tree in (git archive HEAD), and inside it checks:
#   1. as a user other than root, `make up` installs nothing, prints the one
#      `apt-get install` line and exits 1;
#   2. as root, `make up UP_ARGS="--no-open --port 0 --exit-after-start"`
#      installs the packages, builds, serves and prints the dashboard URL;
#   3. `make test` passes.
# Needs: root, debootstrap, a Debian mirror and the npm registry over the
# network (local CAs in /usr/local/share/ca-certificates are copied in),
# about 6 GB of disk; takes tens of minutes. Skipped (exit 0 with a
# message) without root or debootstrap.
# Usage: tests/fresh/debootstrap.sh [DIR]  (default /var/tmp/muser-deb12; it
# is removed first and, unless KEEP=1, afterwards). Logs: DIR.log/*.
# The whole script is one compound command: bash reads it before running
# any of it, so editing this file while a run is under way cannot change it.
{
set -u
cd "$(dirname "$0")/../.."
[ "$(id -u)" = 0 ] || { echo "fresh: skipped: needs root (debootstrap, chroot, mounts)"; exit 0; }
command -v debootstrap >/dev/null || { echo "fresh: skipped: debootstrap is missing (apt-get install debootstrap)"; exit 0; }
D=${1:-/var/tmp/muser-deb12}
L=$D.log
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }

umount_all() {
  local m
  for m in dev/shm dev/pts dev sys proc; do mountpoint -q "$D/$m" && umount -l "$D/$m"; done
  return 0
}
cleanup() {
  umount_all
  [ "${KEEP:-0}" = 1 ] || rm -rf --one-file-system "$D"
}
trap cleanup EXIT
umount_all
rm -rf --one-file-system "$D" "$L"
mkdir -p "$D" "$L"

echo "fresh: debootstrap bookworm into $D (log $L/debootstrap.log)"
if ! debootstrap --variant=minbase --include=make,ca-certificates bookworm "$D" "$MIRROR" >"$L/debootstrap.log" 2>&1; then
  echo "fresh: debootstrap failed: $(tail -2 "$L/debootstrap.log")"; exit 1
fi
cat >"$D/etc/apt/sources.list" <<SRC
deb $MIRROR bookworm main
deb $MIRROR bookworm-updates main
deb http://security.debian.org/debian-security bookworm-security main
SRC
cp /etc/resolv.conf "$D/etc/resolv.conf"
# the host's local CAs (a network that inspects TLS: npm needs them as the
# host does); the chroot's trust store is the Debian one plus these
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  cp /usr/local/share/ca-certificates/*.crt "$D/usr/local/share/ca-certificates/"
  chroot "$D" update-ca-certificates >"$L/ca.log" 2>&1 || { echo "fresh: update-ca-certificates failed"; exit 1; }
fi
mount -t proc proc "$D/proc" && mount -t sysfs sys "$D/sys" && mount --bind /dev "$D/dev" &&
  mount --bind /dev/pts "$D/dev/pts" && mount -t tmpfs shm "$D/dev/shm" || { echo "fresh: mounts failed"; exit 1; }
mkdir -p "$D/opt/muser"
git archive HEAD | tar -x -C "$D/opt/muser"
ok "chroot made, $(git rev-parse --short HEAD) copied to /opt/muser"
in_chroot() {
  chroot "$D" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
    NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt bash -c "$1"
}

# 1. not root: the apt-get line, exit 1, nothing built
in_chroot "useradd -m tester && su tester -c 'cd /opt/muser && make up'" >"$L/up-user.out" 2>"$L/up-user.err"
rc=$?
line=$(grep '^apt-get install' "$L/up-user.out")
if [ $rc = 2 ] && [ "$(wc -l <"$L/up-user.out")" = 1 ] && [[ $line == "apt-get install -y --no-install-recommends "*libedit-dev* ]] &&
  [ ! -e "$D/opt/muser/build" ]; then
  ok "make up as a user: exit status of make 2 (the script's 1), one line: ${line:0:80}..."
else bad "make up as a user: rc=$rc out=$(head -c 300 "$L/up-user.out") err=$(tail -2 "$L/up-user.err")"; fi

# 2. root: installs, builds, serves, stops
echo "fresh: make up as root (log $L/up-root.*)"
in_chroot 'cd /opt/muser && make up UP_ARGS="--no-open --port 0 --exit-after-start"' >"$L/up-root.out" 2>"$L/up-root.err"
rc=$?
if [ $rc = 0 ] && grep -q '^dashboard: http://127\.0\.0\.1:[0-9]*/$' "$L/up-root.out"; then
  ok "make up as root: $(grep '^dashboard:' "$L/up-root.out")"
else bad "make up as root: rc=$rc $(tail -3 "$L/up-root.err")"; fi

# 3. the second command
echo "fresh: make test (log $L/test.out)"
in_chroot 'cd /opt/muser && make test' >"$L/test.out" 2>&1
rc=$?
summary=$(grep '^=== summary' "$L/test.out" | tail -1)
[ $rc = 0 ] && ok "make test: $summary" || bad "make test: rc=$rc $summary"
exit $fail
}
