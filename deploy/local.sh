#!/usr/bin/env bash
# Runs Hearth on this machine with the embedded defaults: everything on loopback, state in
# ./hearth-data. README.md says what it brings up at this stage of the project.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

data_dir="${HEARTH_DATA_DIR:-hearth-data}"
cargo build --quiet --locked -p hearth-control
control=target/debug/hearth-control

if [ ! -f "$data_dir/root.pub" ]; then
    "$control" --data-dir "$data_dir" init
    echo
fi
echo "Keys in $data_dir, checked against the root key:"
"$control" --data-dir "$data_dir" keys show
