#!/bin/sh
# Installs Hearth control on a fresh Debian or Ubuntu server (any Linux with systemd), as root:
#
#   sh deploy/install.sh --host panel.example.net [--binary target/release/hearth-control | --build] [--port 8443]
#
# It installs the binary (/usr/local/bin/hearth-control; `--build` builds it here first with
# cargo, slow on a small server) and the node binary shipped with it (`hearth-node` beside
# the given binary, or `--node-binary PATH`) in /usr/local/lib/hearth, which control.toml's
# `node_binaries` names: the panel signs it as the first node release in one click. It
# creates the `hearth` system user and its data directory (/var/lib/hearth), runs
# `hearth-control init` for the host name (keys, a self-signed certificate, control.toml
# listening on the port for everyone, with that name as its public address), installs and
# starts the systemd unit, and prints the one-time setup link. It opens nothing in a
# firewall: it says which TCP port to open. Run again on a server it installed, it says so
# and changes nothing; it never touches a data directory that is already there.
#
# For tests: HEARTH_INSTALL_ROOT is a prefix for every path written (the system user goes in
# its etc/passwd), HEARTH_SYSTEMCTL and HEARTH_JOURNALCTL the systemctl and journalctl to
# call, HEARTH_INSTALL_OS stands for `uname -s`; `--bind ADDRESS` listens there instead of
# on every address.
set -eu

root="${HEARTH_INSTALL_ROOT:-}"
systemctl="${HEARTH_SYSTEMCTL:-systemctl}"
journalctl="${HEARTH_JOURNALCTL:-journalctl}"
os="${HEARTH_INSTALL_OS:-$(uname -s)}"
here="$(cd "$(dirname "$0")" && pwd)"

fail() {
    echo "hearth install: $*" >&2
    exit 1
}
say() { echo "hearth install: $*"; }

host='' binary='' node_binary='' build='' port=8443 bind=0.0.0.0
while [ $# -gt 0 ]; do
    case "$1" in
        --host) host="$2"; shift 2 ;;
        --binary) binary="$2"; shift 2 ;;
        --node-binary) node_binary="$2"; shift 2 ;;
        --build) build=1; shift ;;
        --port) port="$2"; shift 2 ;;
        --bind) bind="$2"; shift 2 ;;
        *) fail "unknown option $1 (usage: sh deploy/install.sh --host NAME [--binary PATH [--node-binary PATH] | --build] [--port 8443])" ;;
    esac
done
[ -n "$host" ] || fail "give the name (or address) people and nodes reach this server by: --host panel.example.net"
case "$host" in
    *[!A-Za-z0-9.-]* | -* | .*) fail "--host takes a DNS name or an IPv4 address, like panel.example.net" ;;
esac
case "$port" in
    '' | *[!0-9]*) fail "--port takes a number from 1 to 65535" ;;
esac
[ "$port" -ge 1 ] && [ "$port" -le 65535 ] || fail "--port takes a number from 1 to 65535"

[ "$os" = Linux ] || fail "this server runs $os: Hearth control's installer is for Linux with systemd"
[ -n "$root" ] || [ "$(id -u)" = 0 ] || fail "run this as root (sudo -i, then run it again)"
[ -d "$root/run/systemd/system" ] || fail "this server does not run systemd: install by hand (docs/running/control.md, \"Control on a VPS\")"

if [ -n "$build" ]; then
    command -v cargo >/dev/null 2>&1 || fail "--build needs cargo (https://rustup.rs), or give --binary"
    say "building hearth-control and hearth-node (minutes on a small server)"
    (cd "$here/.." && cargo build --release --locked -p hearth-control -p hearth-node) || fail "the build failed (above)"
    binary="$here/../target/release/hearth-control"
fi
[ -n "$binary" ] || fail "give the binary to install (--binary PATH) or --build"
[ -f "$binary" ] || fail "there is no binary at $binary"
if [ -n "$node_binary" ]; then
    [ -f "$node_binary" ] || fail "there is no node binary at $node_binary"
elif [ -f "$(dirname "$binary")/hearth-node" ]; then
    node_binary="$(dirname "$binary")/hearth-node"
fi
"$binary" --version >/dev/null 2>&1 || fail "$binary does not run on this server (another architecture, or an older glibc?)"

bin="$root/usr/local/bin/hearth-control"
lib="$root/usr/local/lib/hearth"
data="$root/var/lib/hearth"
unit="$root/etc/systemd/system/hearth-control.service"
if [ -e "$data" ]; then
    if [ -e "$data/control.toml" ] && [ -e "$unit" ] && cmp -s "$binary" "$bin"; then
        say "Hearth control is installed here already ($data): nothing changed"
        say "the setup link, if no owner was made yet: $journalctl -u hearth-control | grep setup#"
        exit 0
    fi
    fail "$data exists: this installer never touches a data directory that is there (move it away, or install by hand)"
fi

made='' new_user=''
cleanup() {
    status=$?
    if [ "$status" -ne 0 ]; then
        for path in $made; do rm -rf "$path"; done
        if [ -n "$new_user" ]; then
            if [ -n "$root" ]; then userdel --prefix "$root" hearth; else userdel hearth; fi
        fi
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

if ! grep -q '^hearth:' "$root/etc/passwd" 2>/dev/null; then
    if [ -n "$root" ]; then
        useradd --prefix "$root" --system --home-dir /var/lib/hearth --shell /usr/sbin/nologin hearth
    else
        useradd --system --home-dir /var/lib/hearth --shell /usr/sbin/nologin hearth
    fi
    new_user=1
fi
uid="$(grep '^hearth:' "$root/etc/passwd" | cut -d: -f3)"
gid="$(grep '^hearth:' "$root/etc/passwd" | cut -d: -f4)"

made="$bin $data $unit"
mkdir -p "$root/usr/local/bin" "$root/var/lib" "$root/etc/systemd/system"
install -m 0755 "$binary" "$bin"
if [ -n "$node_binary" ]; then
    [ -e "$lib" ] || made="$made $lib"
    install -D -m 0755 "$node_binary" "$lib/hearth-node"
fi
install -d -o "$uid" -g "$gid" -m 0700 "$data"
# As root, then handed to the user (in a test root the user exists in that root only).
HEARTH_DATA_DIR="$data" "$bin" init --host "$host" >"$data/init.txt" || fail "hearth-control init failed (above)"
sed -i -e "s|^listen = .*|listen = \"$bind:$port\"|" \
    -e "s|^# public_url = .*|public_url = \"https://$host:$port\"|" "$data/control.toml"
if [ -n "$node_binary" ]; then
    sed -i -e "s|^# node_binaries = .*|node_binaries = \"$lib\"|" "$data/control.toml"
fi
chown -R "$uid:$gid" "$data"
install -m 0644 "$here/hearth-control.service" "$unit"
"$systemctl" daemon-reload || fail "systemctl daemon-reload failed"
"$systemctl" enable --now hearth-control || fail "control did not start: journalctl -u hearth-control"
made='' new_user=''

# The setup link control prints on its first start.
link=''
tries=0
while [ -z "$link" ] && [ "$tries" -lt 60 ]; do
    link="$("$journalctl" -u hearth-control -o cat 2>/dev/null | grep -o 'https://[^ ]*/setup#[^ ]*' | tail -n 1 || true)"
    [ -n "$link" ] || { tries=$((tries + 1)); sleep 0.5; }
done
cat "$data/init.txt"
rm -f "$data/init.txt"
echo
say "control is running on TCP port $port (open it in your firewall: the panel and the nodes use it)"
if [ -n "$link" ]; then
    say "create the owner, once, at: $link"
else
    say "the setup link is in the log: $journalctl -u hearth-control | grep setup#"
fi
if [ -n "$node_binary" ]; then
    say "hearth-node came with it ($lib): the panel publishes it as the first node release in one click (Nodes, Add)"
else
    say "no hearth-node came with it: to add nodes in one line, build one (sh deploy/build-release.sh) and sign it (docs/running/upgrades.md)"
fi
