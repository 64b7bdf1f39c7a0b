#!/bin/sh
# Builds Hearth's server programs for any x86_64 Linux: hearth-control and hearth-node linked
# statically against musl, so they need no particular glibc (the usual build, on this Debian 12,
# needs glibc 2.34 or later: Debian 12, Ubuntu 22.04, RHEL 9 and newer). The binaries land in
# target/dist/ with their SHA-256; `hearth-control release sign` takes the node's as is, and
# deploy/install.sh takes the control's (--binary).
#
#   sh deploy/build-release.sh
#
# It adds the Rust target (rustup) and musl's C compiler (Debian's musl-tools, for the C in
# ring and SQLite) when they are missing.
set -eu
cd "$(dirname "$0")/.."
target=x86_64-unknown-linux-musl
rustup target list --installed | grep -qx "$target" || rustup target add "$target"
command -v musl-gcc >/dev/null 2>&1 ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends musl-tools </dev/null
cargo build --release --locked --target "$target" -p hearth-control -p hearth-node
mkdir -p target/dist
for program in hearth-control hearth-node; do
    cp "target/$target/release/$program" "target/dist/$program"
done
cd target/dist
ls -l hearth-control hearth-node
sha256sum hearth-control hearth-node
