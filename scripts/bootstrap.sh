#!/usr/bin/env bash
# Prepare this machine for hpcjobs development, the demo and the test suite:
#   - the Debian packages the local sandbox cluster needs (installed when run as root),
#   - a virtualenv in .venv with hpcjobs (editable), its dev tools and CPU-only torch.
# Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

# debootstrap builds the other releases' Debian roots (scripts/test-other-release.sh); strace
# counts the file system calls of the scale test (tests/scale) and of benchmarks/.
PACKAGES=(slurmctld slurmd slurm-client slurmdbd munge mariadb-server numactl shellcheck openssh-server chromium debootstrap strace)

missing=()
for pkg in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed"; then
        missing+=("$pkg")
    fi
done
if ((${#missing[@]})); then
    if [[ $(id -u) -eq 0 ]]; then
        echo "bootstrap: installing ${missing[*]}" >&2
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -q >/dev/null
        apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
    else
        echo "bootstrap: missing Debian packages: ${missing[*]}" >&2
        echo "bootstrap: run: sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
        exit 2
    fi
fi

PYTHON=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
    echo "bootstrap: creating .venv with $($PYTHON --version)" >&2
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
echo "bootstrap: installing hpcjobs and its dev tools into .venv" >&2
.venv/bin/python -m pip install -q -e '.[dev]' 2> >(grep -v "^WARNING: Location" >&2)
if ! .venv/bin/python -c "import torch, numpy" 2>/dev/null; then
    # The CPU build: on these machines pip takes it from a local wheel.
    echo "bootstrap: installing torch==2.13.0 (CPU) for the DDP examples and tests" >&2
    .venv/bin/python -m pip install -q torch==2.13.0 numpy 2> >(grep -v "^WARNING: Location" >&2)
fi
# The frameworks whose programs the live tests run unchanged (docs/frameworks.md), after torch:
# with the CPU torch in place they add no other build of it.
if ! .venv/bin/python -c "import lightning, transformers, accelerate" 2>/dev/null; then
    echo "bootstrap: installing lightning, transformers and accelerate for the framework tests" >&2
    .venv/bin/python -m pip install -q 'lightning>=2.6,<2.7' 'transformers>=4.50' 'accelerate>=1.0' \
        2> >(grep -v "^WARNING: Location" >&2)
fi
echo "bootstrap: ready" >&2
