#!/usr/bin/env bash
# Run the whole test suite: lint, type checks, unit, golden and live Slurm tests.
# Sets up everything it needs first (see scripts/bootstrap.sh). Extra arguments go to pytest.
#
# The live tests then run again against the other Slurm releases (22.05 or 24.11, whichever
# this machine does not run, and 26.05 from Debian unstable), each in a Debian root, see
# scripts/test-other-release.sh; unit tests run once. The roots are built and their sandboxes
# started in the background while this machine's own suite runs, and their live suites run
# side by side (own roots, ports and state). HPCJOBS_TEST_BOTH_RELEASES=0 skips the other
# releases, except under CI (docs/testing.md). Ends with a table of where the time went.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
logs=$(mktemp -d /tmp/hpcjobs-test-logs.XXXXXX)
chmod 755 "$logs"
timings=$logs/timings
failed=()
started_all=$(date +%s)

# stage NAME COMMAND...: run COMMAND, note its wall time and whether it failed.
stage() {
    local name=$1 t0 rc
    shift
    echo "== $name" >&2
    t0=$(date +%s)
    "$@"
    rc=$?
    printf '%s\t%s\t%s\n' "$name" $(($(date +%s) - t0)) "$rc" >>"$timings"
    ((rc == 0)) || failed+=("$name")
    return "$rc"
}

# The closing lines: one row per stage, then the total, then one count of every pytest run.
report() {
    local total=$(($(date +%s) - started_all)) passed=0 failures=0 skipped=0 line n
    echo >&2
    echo "== where the time went (budget: 60 min)" >&2
    printf '%-48s %8s  %s\n' stage seconds result >&2
    while IFS=$'\t' read -r name secs rc; do
        printf '%-48s %8s  %s\n' "$name" "$secs" "$([[ $rc == 0 ]] && echo ok || echo "FAILED ($rc)")" >&2
    done <"$timings"
    printf '%-48s %8s  %s\n' "total" "$total" "$(printf '%d min %02d s' $((total / 60)) $((total % 60)))" >&2
    for log in "$logs"/pytest-*.log; do
        [[ -f $log ]] || continue
        line=$(grep -E '^(=+ )?[0-9]+ (passed|failed|error)' "$log" | tail -n 1)
        n=$(grep -oE '[0-9]+ passed' <<<"$line" | cut -d' ' -f1); passed=$((passed + ${n:-0}))
        n=$(grep -oE '[0-9]+ (failed|errors?)' <<<"$line" | awk '{ s += $1 } END { print s + 0 }')
        failures=$((failures + n))
        n=$(grep -oE '[0-9]+ skipped' <<<"$line" | cut -d' ' -f1); skipped=$((skipped + ${n:-0}))
    done
    ((${#failed[@]})) && echo "test: failed stages: ${failed[*]}" >&2
    echo "total: $passed passed, $failures failed, $skipped skipped"
}

if ! stage "bootstrap (packages, .venv)" scripts/bootstrap.sh; then
    report
    exit 1
fi

others=()
if [[ ${HPCJOBS_TEST_BOTH_RELEASES:-1} == 0 && ${CI:-} != true ]]; then
    echo "test: HPCJOBS_TEST_BOTH_RELEASES=0: the other Slurm releases are not tested" >&2
else
    [[ ${HPCJOBS_TEST_BOTH_RELEASES:-1} == 0 ]] &&
        echo "test: CI runs every Slurm release; HPCJOBS_TEST_BOTH_RELEASES=0 is ignored" >&2
    mapfile -t others < <(.venv/bin/python -c 'from hpcjobs.sandbox.release import host_release, other_releases
r = host_release()
print("\n".join(o.codename for o in other_releases(r)) if r else "")')
    if ((${#others[@]} == 0)); then
        echo "test: this machine is neither Debian 12 nor 13: the other releases are not tested" >&2
        [[ ${CI:-} == true ]] && { report; exit 2; }
    fi
fi

# The other releases' roots, sandboxes and venvs: built in the background meanwhile.
declare -A prep_pid
for rel in "${others[@]}"; do
    (
        t0=$(date +%s)
        scripts/test-other-release.sh --release "$rel" --prepare >"$logs/prepare-$rel.log" 2>&1
        rc=$?
        printf '%s\t%s\t%s\n' "prepare $rel root and sandbox (background)" $(($(date +%s) - t0)) "$rc" >>"$timings"
        exit "$rc"
    ) &
    prep_pid[$rel]=$!
done

stage "ruff" bash -c '.venv/bin/ruff check . && .venv/bin/ruff format --check .'
stage "mypy" .venv/bin/mypy
stage "import layers" .venv/bin/lint-imports --no-cache
host=$(.venv/bin/python -c 'from hpcjobs.sandbox.release import host_release
r = host_release()
print(r.codename if r else "this machine")')
# shellcheck disable=SC2016 # expanded by the inner bash
stage "pytest: unit, golden, live ($host)" bash -c 'set -o pipefail; .venv/bin/python -m pytest "$@" 2>&1 | tee "$0"' \
    "$logs/pytest-$host.log" "$@"

# Only options carry over: test paths given for the first run need not exist for the others.
options=()
for arg in "$@"; do
    [[ $arg == -* ]] && options+=("$arg")
done
declare -A run_pid
for rel in "${others[@]}"; do
    if ! wait "${prep_pid[$rel]}"; then
        echo "test: preparing the $rel root failed; its log:" >&2
        cat "$logs/prepare-$rel.log" >&2
        failed+=("prepare $rel")
        .venv/bin/hpcjobs sandbox down --state-dir "/tmp/hpcjobs-test-sandbox-$rel" >&2 || true
        continue
    fi
    (
        t0=$(date +%s)
        scripts/test-other-release.sh --release "$rel" --run "${options[@]}" \
            >"$logs/pytest-$rel.log" 2>&1
        rc=$?
        printf '%s\t%s\t%s\n' "pytest: live ($rel, side by side)" $(($(date +%s) - t0)) "$rc" >>"$timings"
        exit "$rc"
    ) &
    run_pid[$rel]=$!
done
for rel in "${!run_pid[@]}"; do
    wait "${run_pid[$rel]}" || failed+=("pytest $rel")
    echo "== pytest output ($rel)" >&2
    cat "$logs/pytest-$rel.log"
done
report
((${#failed[@]} == 0))
