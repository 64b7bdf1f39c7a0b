#!/usr/bin/env bash
# Runs Hearth on this machine with the embedded defaults: everything on loopback, state in
# ./hearth-data (or $HEARTH_DATA_DIR). It brings up the native edge (libSQL, 127.0.0.1:8787 or
# $HEARTH_EDGE_LISTEN) and control (SQLite, https://127.0.0.1:8443 or $HEARTH_LISTEN) pushing
# to it. On the first run control prints a one-time setup link. Ctrl-C (or SIGTERM) stops both.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

data_dir="${HEARTH_DATA_DIR:-hearth-data}"
edge_listen="${HEARTH_EDGE_LISTEN:-127.0.0.1:8787}"
export HEARTH_LISTEN="${HEARTH_LISTEN:-127.0.0.1:8443}"
cargo build --quiet --locked -p hearth-control -p hearth-edge
control=target/debug/hearth-control
edge=target/debug/hearth-edge

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

# The edge first: control pushes to it from its first second.
edge_out="$data_dir/edge.out"
"$edge" --config "$data_dir/edge.toml" --db "$data_dir/edge.db" --listen "$edge_listen" >"$edge_out" &
pids+=($!)
for _ in $(seq 100); do
    [ -s "$edge_out" ] && break
    sleep 0.1
done
edge_line="$(head -n 1 "$edge_out")"
echo "$edge_line"
export HEARTH_EDGE_URL="${edge_line#hearth-edge listening on }"

"$control" --data-dir "$data_dir" serve &
pids+=($!)
echo "Edge data: $data_dir/edge.db; control data: $data_dir/control.db. Ctrl-C stops both."
wait -n "${pids[@]}" || true
stop
