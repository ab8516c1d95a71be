#!/usr/bin/env bash
# Run the whole test suite: lint, type checks, unit, golden and live Slurm tests.
# Sets up everything it needs first (see scripts/bootstrap.sh). Extra arguments go to pytest.
#
# The live tests also run against the other Slurm releases (22.05 or 24.11, whichever this
# machine does not run, and 26.05 from Debian unstable), each in a Debian root, see
# scripts/test-other-release.sh; unit tests run once. The order: every release's live suite
# side by side (own roots, ports and state; they mostly wait on Slurm), with this machine's
# unit and golden tests beside them under `nice -n 19`; then the scale test, alone on the
# machine. With test paths given, one run of those, then the others' live suites.
# HPCJOBS_TEST_BOTH_RELEASES=0 skips the other releases, except under CI (docs/testing.md).
# Ends with a table of where the time went, pytest's slowest tests of each run, and each
# failed test's line from every run.
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

# in_background NAME LOG COMMAND...: COMMAND in the background, its output to LOG, its wall
# time and result noted like a stage's; its pid is $! afterwards.
in_background() {
    local name=$1 log=$2
    shift 2
    (
        t0=$(date +%s)
        "$@" >"$log" 2>&1
        rc=$?
        printf '%s\t%s\t%s\n' "$name" $(($(date +%s) - t0)) "$rc" >>"$timings"
        exit "$rc"
    ) &
}

# The closing lines: one row per stage, then the total, then one count of every pytest run.
report() {
    local total=$(($(date +%s) - started_all)) passed=0 failures=0 skipped=0 line
    echo >&2
    echo "== where the time went (budget: 60 min)" >&2
    printf '%-48s %8s  %s\n' stage seconds result >&2
    while IFS=$'\t' read -r name secs rc; do
        printf '%-48s %8s  %s\n' "$name" "$secs" "$([[ $rc == 0 ]] && echo ok || echo "FAILED ($rc)")" >&2
    done <"$timings"
    printf '%-48s %8s  %s\n' "total" "$total" "$(printf '%d min %02d s' $((total / 60)) $((total % 60)))" >&2
    for log in "$logs"/pytest-*.log; do
        [[ -f $log ]] || continue
        # pytest's summary: "3 failed, 90 passed, 2 skipped, 1 error in 10.2s" (any order).
        line=$(grep -E '^(=+ )?[0-9]+ [a-z]+(, [0-9]+ [a-z]+)* in [0-9]' "$log" | tail -n 1)
        read -r p f s < <(grep -oE '[0-9]+ [a-z]+' <<<"$line" | awk '
            $2 == "passed" { p += $1 } $2 == "failed" || $2 ~ /^errors?$/ { f += $1 }
            $2 == "skipped" { s += $1 } END { print p + 0, f + 0, s + 0 }')
        passed=$((passed + p)) failures=$((failures + f)) skipped=$((skipped + s))
    done
    # Each failed test's line (pytest's short summary), so that the end of the output says
    # what failed and why, whatever was cut from the middle.
    for log in "$logs"/pytest-*.log; do
        [[ -f $log ]] || continue
        grep -E '^(FAILED|ERROR) ' "$log" | cut -c1-400 | sed "s|^|$(basename "$log" .log): |" >&2
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
    if ! names=$(.venv/bin/python -c 'from hpcjobs.sandbox.release import host_release, other_releases
r = host_release()
print("\n".join(o.codename for o in other_releases(r)) if r else "")'); then
        echo "test: could not tell which Slurm releases to test" >&2
        report
        exit 2
    fi
    mapfile -t others < <(grep . <<<"$names")
    if ((${#others[@]} == 0)); then
        echo "test: this machine is not a Debian release the sandbox knows: the other releases are not tested" >&2
        [[ ${CI:-} == true ]] && { report; exit 2; }
    fi
fi

# Whatever happens (a failure, Ctrl-C), no daemon of the other releases' sandboxes outlives
# this script: the background jobs end and every one of those sandboxes goes down.
cleanup() {
    local pids
    mapfile -t pids < <(jobs -p)
    if ((${#pids[@]})); then
        kill "${pids[@]}" 2>/dev/null
        wait "${pids[@]}" 2>/dev/null
    fi
    for rel in "${others[@]}"; do
        .venv/bin/hpcjobs sandbox down --state-dir "${HPCJOBS_TEST_OTHER_SANDBOX_DIR:-/tmp/hpcjobs-test-sandbox}-$rel" >/dev/null 2>&1 || true
    done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The other releases' roots, sandboxes and venvs: built in the background meanwhile.
declare -A prep_pid
for rel in "${others[@]}"; do
    in_background "prepare $rel root and sandbox (background)" "$logs/prepare-$rel.log" \
        scripts/test-other-release.sh --release "$rel" --prepare
    prep_pid[$rel]=$!
done

stage "ruff" bash -c '.venv/bin/ruff check . && .venv/bin/ruff format --check .'
stage "mypy" .venv/bin/mypy
stage "import layers" .venv/bin/lint-imports --no-cache
# The job's supervisor runs on the compute nodes' own python3: 3.8 or newer.
stage "vermin (supervisor and contract, Python >= 3.8)" .venv/bin/vermin -q --no-tips \
    --violations -t=3.8- hpcjobs/runtime/supervisor hpcjobs/contract
host=$(.venv/bin/python -c 'from hpcjobs.sandbox.release import host_release
r = host_release()
print(r.codename if r else "this machine")')
# pytest_stage NAME LOG COMMAND...: a stage whose output also goes to LOG (counted by report).
pytest_stage() {
    local name=$1 log=$2
    shift 2
    # shellcheck disable=SC2016 # expanded by the inner bash
    stage "$name" bash -c 'set -o pipefail; "$@" 2>&1 | tee "$0"' "$log" "$@"
}

# Only options carry over to the other releases: test paths given for the first run need not
# exist for the others. --durations: the slowest tests of each run, beside the stage table.
options=(--durations=10)
given_paths=false
for arg in "$@"; do
    if [[ $arg == -* ]]; then options+=("$arg"); else given_paths=true; fi
done
declare -A run_pid

# The other releases' live suites, side by side in the background, each once its root is ready.
start_others() {
    for rel in "${others[@]}"; do
        if ! wait "${prep_pid[$rel]}"; then
            echo "test: preparing the $rel root failed; its log:" >&2
            cat "$logs/prepare-$rel.log" >&2
            failed+=("prepare $rel")
            continue
        fi
        in_background "pytest: live ($rel, side by side)" "$logs/pytest-$rel.log" \
            scripts/test-other-release.sh --release "$rel" --run "${options[@]}"
        run_pid[$rel]=$!
    done
}

wait_others() {
    for rel in "${!run_pid[@]}"; do
        wait "${run_pid[$rel]}" || failed+=("pytest $rel")
        echo "== pytest output ($rel)" >&2
        cat "$logs/pytest-$rel.log"
    done
}

pytest=(.venv/bin/python -m pytest --durations=15)
if $given_paths; then
    # Test paths (or an option's value) given: one run of what was asked, then the others.
    pytest_stage "pytest ($host)" "$logs/pytest-$host.log" "${pytest[@]}" "$@"
    start_others
    wait_others
else
    # Every release's live suite side by side, and the unit and golden tests beside them,
    # niced: they take the CPU the live suites leave while those wait on Slurm.
    start_others
    in_background "pytest: unit and golden ($host, niced, side by side)" \
        "$logs/pytest-$host-unit.log" nice -n 19 "${pytest[@]}" tests/unit "$@"
    unit_pid=$!
    pytest_stage "pytest: live ($host, side by side)" "$logs/pytest-$host-live.log" \
        "${pytest[@]}" tests/live "$@"
    wait "$unit_pid" || failed+=("pytest: unit and golden ($host)")
    echo "== pytest output (unit and golden, $host)" >&2
    cat "$logs/pytest-$host-unit.log"
    wait_others
    # Alone on the machine: its sanity bounds and timings assume so (1,024 processes on the
    # host's cores).
    pytest_stage "pytest: scale ($host, alone)" "$logs/pytest-$host-scale.log" \
        "${pytest[@]}" tests/scale "$@"
fi
report
((${#failed[@]} == 0))
