# shellcheck shell=bash
# Runs the workspace's tests, several test programs at a time. Source tests/tools/toolchain.sh
# first (it sets HEARTH_REPO_DIR), then this file, then call:
#
#   hearth_run_tests [JOBS]   # JOBS test programs at once (default $HEARTH_TEST_JOBS or 4)
#
# What `cargo test --workspace` runs, run differently: cargo runs one test program after the
# other, and most of Hearth's spend their time waiting on the processes they start (edges,
# control, nodes, workerd, sing-box, Chromium), so two cores sit idle most of a serial run.
# This builds every test program and the three programs the tests start in one build
# (`cargo build --workspace --all-targets`, hearth_tests::BUILD_ARGS: one set of features for
# both, and no test process builds anything again), runs the doc tests, then runs the test
# programs JOBS at a time, the slowest first, each in its package's folder as cargo would, and
# last, alone, those that measure rates. Each program's output goes to
# target/test-logs/<name>.log; a failing program's log is printed whole. Fails when any fails.

# The test programs that take longest, longest first (from CI's logs): started first, so that
# the short ones fill the gaps at the end. The others follow in cargo's order.
HEARTH_SLOW_TESTS="edge tamper edges restore system control hostile_edge node install ui fair_use update hearth-control"
# The tests that measure rates (a user's speed limit held within 5 %, Brutal's throughput):
# run alone once the others are done, as on a busy machine they would measure the machine. A
# word is a test program (all of it alone) or PROGRAM/FILTER (its tests whose names contain
# FILTER alone; the program's other tests run in the pool, with `--skip FILTER`).
HEARTH_ALONE_TESTS="node/brutal_ node/a_users_speed_limit mihomo"

hearth_run_tests() {
    local jobs="${1:-${HEARTH_TEST_JOBS:-4}}" logs list failed="" name
    logs="$HEARTH_REPO_DIR/target/test-logs"
    HEARTH_TEST_LOGS="$logs"
    rm -rf "$logs" && mkdir -p "$logs" || return 1
    (
        cd "$HEARTH_REPO_DIR" || exit 1
        cargo build --workspace --all-targets --locked --message-format=json-render-diagnostics >"$logs/build.json"
    ) || return 1
    # Where each test program runs (pool or alone), its name, package folder, path and
    # arguments; the slow ones first.
    list="$(python3 - "$logs/build.json" "$HEARTH_SLOW_TESTS" "$HEARTH_ALONE_TESTS" <<'EOF'
import json, os, sys
programs = []
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        programs.append((m["target"]["name"], os.path.dirname(m["manifest_path"]), m["executable"]))
slow = sys.argv[2].split()
alone = [word.partition("/")[::2] for word in sys.argv[3].split()]
programs.sort(key=lambda p: slow.index(p[0]) if p[0] in slow else len(slow))
names = [p[0] for p in programs]
for program, folder, exe in programs:
    # Two programs of one name (a package's lib and bin tests): the log says which.
    name = program if names.count(program) == 1 else f"{program}-{os.path.basename(exe)}"
    whole = any(p == program and not f for p, f in alone)
    filters = [f for p, f in alone if p == program and f]
    if whole:
        print("alone", name, folder, exe, sep="\t")
        continue
    print("pool", name, folder, exe, *(a for f in filters for a in ("--skip", f)), sep="\t")
    if filters:
        print("alone", f"{name}-alone", folder, exe, *filters, sep="\t")
EOF
)" || return 1
    [ -n "$list" ] || { echo "tests: cargo built no test program" >&2; return 1; }
    (cd "$HEARTH_REPO_DIR" && cargo test --workspace --locked --doc) >"$logs/doc.log" 2>&1 \
        || { cat "$logs/doc.log"; return 1; }
    echo "ok the doc tests: $(grep -c '^test .* ok$' "$logs/doc.log") passed"

    # The others JOBS at a time, then the ones that measure rates one by one.
    local pooled alone
    pooled="$(sed -n 's/^pool\t//p' <<<"$list")"
    alone="$(sed -n 's/^alone\t//p' <<<"$list")"
    hearth_parallel "$jobs" _hearth_test_program <<<"$pooled" || failed="$HEARTH_PARALLEL_FAILED"
    hearth_parallel 1 _hearth_test_program <<<"$alone" || failed="$failed$HEARTH_PARALLEL_FAILED"
    if [ -n "$failed" ]; then
        for name in $failed; do
            printf '\n==> the output of %s (%s)\n' "$name" "$logs/$name.log"
            cat "$logs/$name.log"
        done
        echo "tests: failed:$failed" >&2
        return 1
    fi
}

# One test program (NAME DIR EXE [ARGS...]): run in DIR with ARGS, its output to
# $HEARTH_TEST_LOGS/NAME.log, then one line saying how it went.
_hearth_test_program() {
    local name="$1" dir="$2" exe="$3" log="$HEARTH_TEST_LOGS/$1.log" started=$SECONDS status=0
    (cd "$dir" && exec "$exe" "${@:4}") >"$log" 2>&1 </dev/null || status=$?
    printf '%s %s in %ss: %s\n' "$([ $status -eq 0 ] && echo ok || echo FAILED)" "$name" \
        "$((SECONDS - started))" "$(grep -E '^test result:' "$log" | tail -n 1 | sed 's/^test result: //')"
    return $status
}
