#!/usr/bin/env bash
# Builds Hearth's manual (an mdBook: docs/book.toml, docs/SUMMARY.md) into target/book/, or
# into the folder given as the first argument. It installs mdBook from crates.io into
# target/tools/ the first time (about a minute); the build itself reads nothing from the
# network. Open target/book/index.html in a browser.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
# shellcheck source=../tests/tools/toolchain.sh
source ../tests/tools/toolchain.sh
hearth_install_mdbook
out="${1:-../target/book}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
"$HEARTH_MDBOOK" build --dest-dir "$out" .
echo "the manual is in $out (open $out/index.html)"
