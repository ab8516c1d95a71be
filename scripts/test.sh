#!/usr/bin/env bash
# Run the whole test suite: lint, type checks, unit, golden and live Slurm tests.
# Sets up everything it needs first (see scripts/bootstrap.sh). Extra arguments go to pytest.
#
# With HPCJOBS_TEST_BOTH_RELEASES=1 the live tests then run a second time, against the other
# Debian release's Slurm (22.05 on trixie, 24.11 on bookworm) inside a Debian root, see
# scripts/test-other-release.sh; unit tests run once. Not on by default yet (docs/testing.md).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
echo "== ruff" >&2
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "== mypy" >&2
.venv/bin/mypy
echo "== pytest (this machine's release)" >&2
.venv/bin/python -m pytest "$@"
[[ ${HPCJOBS_TEST_BOTH_RELEASES:-0} == 1 ]] || exit 0
# Only options carry over: test paths given for the first run need not exist for the second.
options=()
for arg in "$@"; do
    [[ $arg == -* ]] && options+=("$arg")
done
exec scripts/test-other-release.sh "${options[@]}"
