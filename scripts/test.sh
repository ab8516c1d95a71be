#!/usr/bin/env bash
# Run the whole test suite: lint, type checks, unit, golden and live Slurm tests.
# Sets up everything it needs first (see scripts/bootstrap.sh). Extra arguments go to pytest.
#
# The live tests then run a second time, against the other Debian release's Slurm (24.11 on
# bookworm, 22.05 on trixie) inside a Debian root, see scripts/test-other-release.sh; unit tests
# run once. HPCJOBS_TEST_BOTH_RELEASES=0 skips that second run, except under CI (docs/testing.md).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
echo "== ruff" >&2
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "== mypy" >&2
.venv/bin/mypy
echo "== import layers" >&2
.venv/bin/lint-imports --no-cache
echo "== pytest (this machine's release)" >&2
.venv/bin/python -m pytest "$@"
if [[ ${HPCJOBS_TEST_BOTH_RELEASES:-1} == 0 ]]; then
    if [[ ${CI:-} == true ]]; then
        echo "test: CI runs both Slurm releases; HPCJOBS_TEST_BOTH_RELEASES=0 is ignored" >&2
    else
        echo "test: HPCJOBS_TEST_BOTH_RELEASES=0: the other Slurm release was not tested" >&2
        exit 0
    fi
fi
# Only options carry over: test paths given for the first run need not exist for the second.
options=()
for arg in "$@"; do
    [[ $arg == -* ]] && options+=("$arg")
done
exec scripts/test-other-release.sh "${options[@]}"
