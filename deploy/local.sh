#!/usr/bin/env bash
# Runs the whole of Hearth on this machine with the embedded defaults, everything on loopback,
# state in ./hearth-data (or $HEARTH_DATA_DIR):
#   - the native edge (libSQL), on 127.0.0.1:8787 ($HEARTH_EDGE_LISTEN);
#   - control (SQLite), on https://127.0.0.1:8443 ($HEARTH_LISTEN), pushing to the edge;
#   - one node, enrolled with control on first run, serving Hysteria2 on UDP 127.0.0.1:8444
#     ($HEARTH_NODE_PORT);
#   - a demo user, whose link, and a ready sing-box client configuration, it prints.
# Ctrl-C (or SIGTERM) stops everything.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

data_dir="${HEARTH_DATA_DIR:-hearth-data}"
edge_listen="${HEARTH_EDGE_LISTEN:-127.0.0.1:8787}"
node_port="${HEARTH_NODE_PORT:-8444}"
export HEARTH_LISTEN="${HEARTH_LISTEN:-127.0.0.1:8443}"
# (The tests run this script with HEARTH_CARGO_BUILD_ARGS set to how they build the programs,
# so that it finds them built: hearth_tests::BUILD_ARGS.)
# shellcheck disable=SC2086  # the arguments are meant to be split
cargo build --quiet --locked ${HEARTH_CARGO_BUILD_ARGS:--p hearth-control -p hearth-edge -p hearth-node}
control=target/debug/hearth-control
edge=target/debug/hearth-edge
node=target/debug/hearth-node

if [ ! -f "$data_dir/root.pub" ]; then
    "$control" --data-dir "$data_dir" init
    echo
elif [ ! -f "$data_dir/control.toml" ]; then
    echo "$data_dir was made by an older Hearth (no control.toml); move it away and run this again." >&2
    exit 1
fi
echo "Keys in $data_dir, checked against the root key:"
"$control" --data-dir "$data_dir" keys show
echo

pids=()
stop() {
    kill -TERM "${pids[@]}" 2>/dev/null || true
    wait "${pids[@]}" 2>/dev/null || true
    exit 0
}
trap stop INT TERM

# Waits for a line starting with $2 in file $1 and prints the rest of it.
first_line() {
    for _ in $(seq 300); do
        if line="$(grep -m 1 "^$2" "$1" 2>/dev/null)"; then
            echo "${line#"$2"}"
            return 0
        fi
        sleep 0.1
    done
    echo "no '$2' in $1" >&2
    return 1
}

# The edge first: control pushes to it from its first second.
"$edge" --config "$data_dir/edge.toml" --db "$data_dir/edge.db" --listen "$edge_listen" >"$data_dir/edge.out" &
pids+=($!)
HEARTH_EDGE_URL="$(first_line "$data_dir/edge.out" "hearth-edge listening on ")"
export HEARTH_EDGE_URL
echo "hearth-edge listening on $HEARTH_EDGE_URL"

"$control" --data-dir "$data_dir" serve >"$data_dir/control.out" &
pids+=($!)
control_url="$(first_line "$data_dir/control.out" "hearth-control listening on ")"
echo "hearth-control listening on $control_url"
for _ in $(seq 100); do
    grep -m 1 -E '^(First run|Admin)' "$data_dir/control.out" && break
    sleep 0.1
done

# One node, enrolled on the first run with the command control prints.
if [ ! -f "$data_dir/node/node.toml" ]; then
    command="$("$control" --data-dir "$data_dir" node add "This computer" --host 127.0.0.1 --port "$node_port" | grep 'hearth-node enroll')"
    read -r -a words <<<"$command"
    args=()
    for ((i = 2; i < ${#words[@]}; i++)); do
        if [ "${words[i]}" = "--control" ]; then
            args+=(--control "$control_url")
            i=$((i + 1))
        else
            args+=("${words[i]}")
        fi
    done
    "$node" --state "$data_dir/node" enroll "${args[@]}" --listen "127.0.0.1:$node_port" --allow-private
fi
"$node" --state "$data_dir/node" serve >"$data_dir/node.out" &
pids+=($!)
echo "hearth-node listening on $(first_line "$data_dir/node.out" "hearth-node listening on ")"

# A demo user, and a sing-box client configuration made from the profile the edge serves.
if ! link="$("$control" --data-dir "$data_dir" user show demo 2>/dev/null | grep '^link: ')"; then
    link="$("$control" --data-dir "$data_dir" user add demo | grep '^link: ')"
fi
link="${link#link: }"
echo "Demo user's subscription link: $link"
if ! command -v python3 >/dev/null; then
    echo "(python3 is missing: no sing-box client configuration; the link above works in any app)"
    echo "Hearth is running. Ctrl-C stops it."
    wait -n "${pids[@]}" || true
    stop
fi
python3 - "$link" "$data_dir/sing-box-client.json" <<'PY'
import json, sys, time, urllib.request
link, out = sys.argv[1], sys.argv[2]
for _ in range(100):
    try:
        request = urllib.request.Request(link, headers={"User-Agent": "SFA/1.13.0"})
        profile = json.load(urllib.request.urlopen(request, timeout=5))
        outbounds = [o for o in profile["outbounds"] if o["type"] == "hysteria2"]
        if outbounds:
            break
    except Exception:
        pass
    time.sleep(0.2)
else:
    sys.exit("the edge did not serve the demo user's profile")
outbound = dict(outbounds[0], tag="hearth")
config = {
    "log": {"level": "warn"},
    "inbounds": [{"type": "socks", "tag": "in", "listen": "127.0.0.1", "listen_port": 1080}],
    "outbounds": [outbound],
    "route": {"final": "hearth"},
}
with open(out, "w") as f:
    json.dump(config, f, indent=2)
PY
echo "sing-box client configuration (SOCKS on 127.0.0.1:1080): $data_dir/sing-box-client.json"
echo "  sing-box run -c $data_dir/sing-box-client.json"
echo "Sign in at the admin link above; add users with: $control --data-dir $data_dir user add NAME"
echo "Hearth is running. Ctrl-C stops it."
wait -n "${pids[@]}" || true
stop
