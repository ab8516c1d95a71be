#!/usr/bin/env bash
# Run the live suite against the Slurm of the other Debian release (bookworm <-> trixie).
#
# A Slurm 22.05 client cannot talk to a 24.11 controller (nor the reverse), so the sandbox of
# the other release runs in a Debian root (`hpcjobs sandbox up --release OTHER`), and pytest
# runs inside that root too: with the root's own Python in a venv built there once
# (/opt/hpcjobs-venv, rebuilt when pyproject.toml or the checkout's path changes), and this
# checkout bind-mounted at its own path and installed editable. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${HPCJOBS_VENV:-.venv}
repo=$(pwd -P)
other=$("$venv/bin/python" -c 'from hpcjobs.sandbox.release import host_release, other_release
r = host_release()
print(other_release(r).codename if r else "")')
if [[ -z $other ]]; then
    echo "test: this machine is neither Debian 12 nor 13: the other release is not tested" >&2
    [[ ${CI:-} == true ]] && exit 2
    exit 0
fi
state=${HPCJOBS_TEST_OTHER_SANDBOX_DIR:-/tmp/hpcjobs-test-sandbox-$other}
ports=${HPCJOBS_TEST_OTHER_PORT_BASE:-18810}
hpcjobs=("$venv/bin/hpcjobs" sandbox)

was_running=no
"${hpcjobs[@]}" status --state-dir "$state" >/dev/null 2>&1 && was_running=yes
"${hpcjobs[@]}" up --release "$other" --state-dir "$state" --port-base "$ports" --grace-time 15 \
    --bind "$repo" >&2
if [[ $was_running == no ]]; then
    # Stops the daemons and unmounts everything bound into the root; the root stays cached.
    trap '"${hpcjobs[@]}" down --state-dir "$state" >&2 || true' EXIT
fi

root=$state/root
rvenv=/opt/hpcjobs-venv
path=$rvenv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
clean=(/usr/bin/env -i "PATH=$path" HOME=/root LANG=C.UTF-8 "TERM=${TERM:-dumb}")
for var in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
    [[ -n ${!var:-} ]] && clean+=("$var=${!var}")
done
# The editable install points at this checkout's path: a venv built for another checkout
# (a second clone, a worktree) would import hpcjobs from there, or find nothing.
stamp=$({ cat pyproject.toml; echo "$repo"; } | sha256sum | cut -c1-16)
if [[ $(cat "$root$rvenv/.hpcjobs-stamp" 2>/dev/null || true) != "$stamp" ]]; then
    echo "test: installing hpcjobs and its dev tools into $rvenv in the $other root" >&2
    chroot "$root" "${clean[@]}" python3 -m venv "$rvenv"
    # No torch here: PyPI has only a multi-GB CUDA build for Python 3.13 (see tests/conftest.py).
    chroot "$root" "${clean[@]}" /usr/bin/env --chdir="$repo" \
        "$rvenv/bin/python" -m pip install -q -e '.[dev]'
    echo "$stamp" >"$root$rvenv/.hpcjobs-stamp"
fi
echo "== pytest (live, $other, inside $root)" >&2
chroot "$root" "${clean[@]}" "CI=${CI:-}" "HPCJOBS_TEST_SANDBOX_DIR=$state/data" HPCJOBS_TEST_OTHER_RELEASE=1 \
    "HPCJOBS_TEST_PORT_BASE=$ports" /usr/bin/env --chdir="$repo" \
    "$rvenv/bin/python" -m pytest -p no:cacheprovider tests/live "$@"
