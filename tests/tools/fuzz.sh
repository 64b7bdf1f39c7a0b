# shellcheck shell=bash
# The fuzzing tools. Source tests/tools/toolchain.sh first, then this file, then call:
#
#   hearth_install_cargo_fuzz   # cargo-fuzz (crates.io) under <repo>/target/tools/cargo;
#                               # exports HEARTH_CARGO_FUZZ and puts its folder first on PATH
#   hearth_fuzz ARGS...         # `cargo fuzz ARGS...` on tests/fuzz with the stable toolchain
#
# cargo-fuzz drives libFuzzer, which needs nightly flags (-Z sanitizer, -C passes=sancov):
# RUSTC_BOOTSTRAP=1 lets the stable toolchain take them. libfuzzer-sys compiles libFuzzer's
# C++ with the system compiler (g++). Idempotent like the other tools: a second run finds the
# installed version and builds nothing.

HEARTH_CARGO_FUZZ_VERSION="${HEARTH_CARGO_FUZZ_VERSION:-0.13.2}"

hearth_install_cargo_fuzz() {
    HEARTH_TOOLS_DIR="${HEARTH_TOOLS_DIR:-$HEARTH_REPO_DIR/target/tools}"
    command -v c++ >/dev/null || _hearth_apt_install g++ || return 1
    _hearth_cargo_tool cargo-fuzz "$HEARTH_CARGO_FUZZ_VERSION" cargo-fuzz --locked || return 1
    HEARTH_CARGO_FUZZ="$HEARTH_TOOLS_DIR/cargo/bin/cargo-fuzz"
    case ":$PATH:" in
        *":$HEARTH_TOOLS_DIR/cargo/bin:"*) ;;
        *) PATH="$HEARTH_TOOLS_DIR/cargo/bin:$PATH" ;;
    esac
    export HEARTH_TOOLS_DIR HEARTH_CARGO_FUZZ PATH
}

# hearth_fuzz ARGS...: e.g. `hearth_fuzz run envelope -- -runs=1000`. Runs in the repository
# with --fuzz-dir tests/fuzz (the fuzz crate is a workspace of its own) and its own target
# dir, target/fuzz, so it never invalidates the main build.
hearth_fuzz() {
    [ -x "${HEARTH_CARGO_FUZZ:-}" ] || { echo "hearth: run hearth_install_cargo_fuzz first" >&2; return 1; }
    local sub="${1:?usage: hearth_fuzz SUBCOMMAND [args...]}"
    shift
    (
        cd "$HEARTH_REPO_DIR" || exit 1
        unset CARGO_BUILD_TARGET RUSTC RUSTDOC CARGO_UNSTABLE_BUILD_STD
        export RUSTC_BOOTSTRAP=1 CARGO_TARGET_DIR="${HEARTH_FUZZ_TARGET_DIR:-$HEARTH_REPO_DIR/target/fuzz}"
        exec "$HEARTH_CARGO_FUZZ" fuzz "$sub" --fuzz-dir tests/fuzz "$@"
    )
}

# The folder cargo-fuzz builds the targets into (its target dir, the host's triple, release).
_hearth_fuzz_bin_dir() {
    local target_dir="$1" host
    host="$(rustc -vV | sed -n 's/^host: //p')" || return 1
    echo "$target_dir/$host/release"
}

# hearth_fuzz_smoke [SECONDS]: builds every fuzz target without a sanitizer (the smoke run
# looks for panics and the targets' own checks, and keeps CI short) and runs each for SECONDS
# (default $HEARTH_FUZZ_SECONDS or 8) over its committed corpus, tests/fuzz/corpus/<target>,
# which it only reads: new inputs go to target/fuzz/smoke/corpus/<target> (emptied first),
# a crashing input to target/fuzz/smoke/artifacts/<target>/. Two targets run at a time (each
# is one process on one core). Fails when a target crashes, hangs (10 s on one input), runs
# out of memory (2 GiB) or has no corpus.
hearth_fuzz_smoke() {
    local seconds="${1:-${HEARTH_FUZZ_SECONDS:-8}}" target_dir bin work target
    target_dir="${HEARTH_FUZZ_TARGET_DIR:-$HEARTH_REPO_DIR/target/fuzz}"
    hearth_fuzz build --sanitizer none || return 1
    bin="$(_hearth_fuzz_bin_dir "$target_dir")" || return 1
    work="$target_dir/smoke"
    hearth_parallel 2 _hearth_fuzz_smoke_one < <(
        for target in $(hearth_fuzz list); do printf '%s\t%s\t%s\t%s\n' "$target" "$bin" "$work" "$seconds"; done
    ) || { echo "fuzz: failed:$HEARTH_PARALLEL_FAILED (inputs in $work/artifacts)" >&2; return 1; }
}

# One target of the smoke run (TARGET BIN_DIR WORK SECONDS): its corpus for SECONDS, its log
# in WORK/TARGET.log.
_hearth_fuzz_smoke_one() {
    local target="$1" bin="$2" work="$3" seconds="$4" log="$3/$1.log"
    # A fresh scratch corpus each time, so that a run takes the same time however many ran before.
    rm -rf "${work:?}/corpus/$target" && mkdir -p "$work/corpus/$target" "$work/artifacts/$target" || return 1
    if [ -z "$(ls -A "$HEARTH_REPO_DIR/tests/fuzz/corpus/$target" 2>/dev/null)" ]; then
        echo "fuzz: $target has no corpus in tests/fuzz/corpus/$target" >&2
        return 1
    fi
    if "$bin/$target" "$work/corpus/$target" "$HEARTH_REPO_DIR/tests/fuzz/corpus/$target" \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="$work/artifacts/$target/" </dev/null >"$log" 2>&1; then
        echo "fuzz: $target: $(grep -o 'Done [0-9]* runs in [0-9]* second(s)' "$log" | tail -n 1), no crash"
    else
        echo "fuzz: $target FAILED; the end of its log ($log):" >&2
        tail -n 40 "$log" >&2
        return 1
    fi
}
