#!/usr/bin/env bash
# Run the whole test suite: lint, type checks, unit, golden and live Slurm tests.
# Sets up everything it needs first (see scripts/bootstrap.sh). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
echo "== ruff" >&2
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "== mypy" >&2
.venv/bin/mypy
echo "== pytest" >&2
exec .venv/bin/python -m pytest "$@"
