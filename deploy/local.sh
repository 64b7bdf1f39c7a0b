#!/usr/bin/env bash
# Runs Hearth on this machine with the embedded defaults: everything on loopback, state in
# ./hearth-data (or $HEARTH_DATA_DIR). README.md says what it brings up at this stage.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

data_dir="${HEARTH_DATA_DIR:-hearth-data}"
listen="${HEARTH_EDGE_LISTEN:-127.0.0.1:8787}"
cargo build --quiet --locked -p hearth-control -p hearth-edge
control=target/debug/hearth-control
edge=target/debug/hearth-edge

if [ ! -f "$data_dir/root.pub" ]; then
    "$control" --data-dir "$data_dir" init
    echo
fi
echo "Keys in $data_dir, checked against the root key:"
"$control" --data-dir "$data_dir" keys show
echo
echo "Starting the edge (settings: $data_dir/edge.toml, data: $data_dir/edge.db). Ctrl-C stops it."
exec "$edge" --config "$data_dir/edge.toml" --db "$data_dir/edge.db" --listen "$listen"
