#!/bin/sh
# Installs a Hearth node on a fresh Linux server with systemd, in one go: the one-line command
# the panel prints for a node fetches this script from control, checks its SHA-256 and runs it
# as root. It
#   1. checks the server (Linux, a supported architecture, systemd, root, the node's UDP port
#      free, not a node already),
#   2. downloads the node binary of the release in force from control and checks its SHA-256
#      against the one in the command (the panel's, which is trusted: the bytes are not),
#   3. enrolls the node with the command's one-time token,
#   4. installs the binary (/opt/hearth-node), the system user, the state directory
#      (/var/lib/hearth-node) and the systemd unit, and starts the node.
# It refuses with a message, leaving nothing behind, when a step fails; run again on an
# enrolled server it says so and changes nothing.
#
# For tests: HEARTH_INSTALL_ROOT is a prefix for every path written (the system user goes in
# its etc/passwd), HEARTH_SYSTEMCTL the systemctl to call, HEARTH_INSTALL_OS and
# HEARTH_INSTALL_ARCH stand for `uname -s` and `uname -m`.
set -eu

root="${HEARTH_INSTALL_ROOT:-}"
systemctl="${HEARTH_SYSTEMCTL:-systemctl}"
os="${HEARTH_INSTALL_OS:-$(uname -s)}"
machine="${HEARTH_INSTALL_ARCH:-$(uname -m)}"

fail() {
    echo "hearth install: $*" >&2
    exit 1
}
say() { echo "hearth install: $*"; }

control='' api_prefix='' token='' pin='' port='' hashes=''
# Passed on to `hearth-node enroll` as they are (tests listen on loopback).
extra=''
while [ $# -gt 0 ]; do
    case "$1" in
        --control) control="$2"; shift 2 ;;
        --api-prefix) api_prefix="$2"; shift 2 ;;
        --token=*) token="${1#--token=}"; shift ;;
        --control-pin) pin="$2"; shift 2 ;;
        --port) port="$2"; shift 2 ;;
        --sha256) hashes="$2"; shift 2 ;;
        --listen) extra="$extra --listen $2"; shift 2 ;;
        --allow-private) extra="$extra --allow-private"; shift ;;
        *) fail "unknown option $1 (paste the whole command the panel printed)" ;;
    esac
done
[ -n "$control" ] && [ -n "$api_prefix" ] && [ -n "$token" ] && [ -n "$hashes" ] && [ -n "$port" ] ||
    fail "the command is incomplete: paste the whole command the panel printed"

# 1. The server.
[ "$os" = Linux ] || fail "this server runs $os: a Hearth node runs on Linux"
case "$machine" in
    x86_64 | amd64) arch=x86_64 ;;
    aarch64 | arm64) arch=aarch64 ;;
    *) fail "this server's architecture is $machine: Hearth nodes are built for x86_64 and aarch64" ;;
esac
expected=''
for pair in $(echo "$hashes" | tr ',' ' '); do
    [ "${pair%%=*}" = "$arch" ] && expected="${pair#*=}"
done
[ -n "$expected" ] ||
    fail "the release in force has no $arch binary: sign one for $arch (hearth-control release sign) and make a new command"
[ -n "$root" ] || [ "$(id -u)" = 0 ] || fail "run this as root (sudo -i, then paste the command again)"
[ -d "$root/run/systemd/system" ] ||
    fail "this server does not run systemd: install by hand (docs/running/nodes.md, \"Enrolling a node\")"
state="$root/var/lib/hearth-node"
if [ -e "$state/node.toml" ]; then
    say "this server is a Hearth node already ($state/node.toml): nothing changed"
    say "to enroll it again, remove the node first (systemctl disable --now hearth-node; rm -r $state)"
    exit 0
fi
if command -v ss >/dev/null 2>&1 && [ -n "$(ss -Hlun "sport = :$port" 2>/dev/null)" ]; then
    fail "UDP port $port is in use on this server: stop what uses it (ss -lunp), or give the node another port in the panel"
fi

# Whatever fails from here leaves nothing behind.
tmp="$(mktemp -d)"
made='' new_user=''
cleanup() {
    status=$?
    rm -rf "$tmp"
    if [ "$status" -ne 0 ]; then
        for path in $made; do rm -rf "$path"; done
        if [ -n "$new_user" ]; then
            if [ -n "$root" ]; then userdel --prefix "$root" hearth-node; else userdel hearth-node; fi
        fi
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# 2. The binary, checked.
name="hearth-node-linux-$arch"
curl -fsSLk --retry 10 --retry-delay 3 --max-time 300 --max-filesize 134217728 \
    "$control/$api_prefix/install/$name" -o "$tmp/hearth-node" ||
    fail "could not download $name from control ($control): is the release still there?"
got="$(sha256sum "$tmp/hearth-node" | cut -d' ' -f1)"
[ "$got" = "$expected" ] ||
    fail "the downloaded binary's SHA-256 is $got, the command expects $expected: nothing installed"
chmod 0755 "$tmp/hearth-node"

# 3. Enrolled (the token is spent here).
pin_arg=''
[ -n "$pin" ] && pin_arg="--control-pin $pin"
# shellcheck disable=SC2086  # the optional arguments are meant to be split
"$tmp/hearth-node" --state "$tmp/state" enroll --control "$control" --api-prefix "$api_prefix" \
    "--token=$token" $pin_arg $extra ||
    fail "enrollment failed (above): make a new command in the panel and run it again"

# 4. Installed and started.
if ! grep -q '^hearth-node:' "$root/etc/passwd" 2>/dev/null; then
    if [ -n "$root" ]; then
        useradd --prefix "$root" --system --home-dir /var/lib/hearth-node --shell /usr/sbin/nologin hearth-node
    else
        useradd --system --home-dir /var/lib/hearth-node --shell /usr/sbin/nologin hearth-node
    fi
    new_user=1
fi
uid="$(grep '^hearth-node:' "$root/etc/passwd" | cut -d: -f3)"
gid="$(grep '^hearth-node:' "$root/etc/passwd" | cut -d: -f4)"
made="$root/opt/hearth-node $state $root/etc/systemd/system/hearth-node.service"
mkdir -p "$root/opt" "$root/var/lib" "$root/etc/systemd/system"
install -d -o "$uid" -g "$gid" -m 0755 "$root/opt/hearth-node"
install -o "$uid" -g "$gid" -m 0755 "$tmp/hearth-node" "$root/opt/hearth-node/hearth-node"
mv "$tmp/state" "$state"
chown -R "$uid:$gid" "$state"
chmod 0700 "$state"
cat >"$root/etc/systemd/system/hearth-node.service" <<'UNIT'
@UNIT@
UNIT
chmod 0644 "$root/etc/systemd/system/hearth-node.service"
"$systemctl" daemon-reload || fail "systemctl daemon-reload failed"
"$systemctl" enable --now hearth-node || fail "the node did not start: journalctl -u hearth-node"
made='' new_user=''
say "the node is enrolled and running (systemctl status hearth-node; journalctl -u hearth-node)"
