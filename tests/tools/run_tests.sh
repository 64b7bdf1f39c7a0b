# shellcheck shell=bash
# Runs the workspace's tests, several test programs at a time. Source tests/tools/toolchain.sh
# first (it sets HEARTH_REPO_DIR), then this file, then call:
#
#   hearth_run_tests [JOBS]   # JOBS test programs at once (default $HEARTH_TEST_JOBS or 4)
#
# What `cargo test --workspace` runs, run differently: cargo runs one test program after the
# other, and most of Hearth's spend their time waiting on the processes they start (edges,
# control, nodes, workerd, sing-box, Chromium), so two cores sit idle most of a serial run.
# This builds every test program (`cargo test --no-run`), builds the three programs the
# tests start (as `hearth_tests::binary` and deploy/local.sh build them, so no test process
# builds them again), runs the doc tests, then runs the test programs JOBS at a time, the
# slowest first, each in its package's folder as cargo would, and last, alone, those that
# measure rates. Each program's output goes to
# target/test-logs/<name>.log; a failing program's log is printed whole. Fails when any fails.

# The test programs that take longest, longest first (from CI's logs): started first, so that
# the short ones fill the gaps at the end. The others follow in cargo's order.
HEARTH_SLOW_TESTS="edge tamper edges restore system control hostile_edge ui fair_use update hearth-control"
# The test programs that measure rates (a user's speed limit held within 5 %, Brutal's
# throughput): run alone once the others are done, as on a busy machine they would measure
# the machine.
HEARTH_ALONE_TESTS="node mihomo"

hearth_run_tests() {
    local jobs="${1:-${HEARTH_TEST_JOBS:-4}}" logs list failed="" name
    logs="$HEARTH_REPO_DIR/target/test-logs"
    HEARTH_TEST_LOGS="$logs"
    rm -rf "$logs" && mkdir -p "$logs" || return 1
    (
        cd "$HEARTH_REPO_DIR" || exit 1
        cargo test --workspace --locked --no-run --message-format=json-render-diagnostics >"$logs/build.json"
    ) || return 1
    # name, package folder and path of every test program, the slow ones first.
    list="$(python3 - "$logs/build.json" "$HEARTH_SLOW_TESTS" <<'EOF'
import json, os, sys
programs = []
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        programs.append((m["target"]["name"], os.path.dirname(m["manifest_path"]), m["executable"]))
slow = sys.argv[2].split()
programs.sort(key=lambda p: slow.index(p[0]) if p[0] in slow else len(slow))
names = [p[0] for p in programs]
for p in programs:
    # Two programs of one name (a package's lib and bin tests): the log says which.
    name = p[0] if names.count(p[0]) == 1 else f"{p[0]}-{os.path.basename(p[2])}"
    print(name, p[1], p[2], sep="\t")
EOF
)" || return 1
    [ -n "$list" ] || { echo "tests: cargo built no test program" >&2; return 1; }
    (
        cd "$HEARTH_REPO_DIR" || exit 1
        cargo build --quiet --locked -p hearth-control -p hearth-edge -p hearth-node
    ) || return 1
    (cd "$HEARTH_REPO_DIR" && cargo test --workspace --locked --doc) >"$logs/doc.log" 2>&1 \
        || { cat "$logs/doc.log"; return 1; }
    echo "ok the doc tests: $(grep -c '^test .* ok$' "$logs/doc.log") passed"

    # The others JOBS at a time, then the ones that measure rates one by one.
    local pooled alone
    pooled="$(awk -F'\t' -v alone=" $HEARTH_ALONE_TESTS " 'index(alone, " " $1 " ") == 0' <<<"$list")"
    alone="$(awk -F'\t' -v alone=" $HEARTH_ALONE_TESTS " 'index(alone, " " $1 " ") > 0' <<<"$list")"
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

# One test program (NAME DIR EXE): run in DIR, its output to $HEARTH_TEST_LOGS/NAME.log, then
# one line saying how it went.
_hearth_test_program() {
    local name="$1" dir="$2" exe="$3" log="$HEARTH_TEST_LOGS/$1.log" started=$SECONDS status=0
    (cd "$dir" && exec "$exe") >"$log" 2>&1 </dev/null || status=$?
    printf '%s %s in %ss: %s\n' "$([ $status -eq 0 ] && echo ok || echo FAILED)" "$name" \
        "$((SECONDS - started))" "$(grep -E '^test result:' "$log" | tail -n 1 | sed 's/^test result: //')"
    return $status
}
