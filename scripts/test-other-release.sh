#!/usr/bin/env bash
# Run the live suite against the Slurm of another Debian release, inside a Debian root.
#
#   scripts/test-other-release.sh [--release NAME] [--prepare | --run] [PYTEST OPTION...]
#
# NAME is bookworm, trixie or sid (Debian unstable); without it, the other stable release
# (bookworm <-> trixie). A Slurm client cannot talk to a controller of another release, so the
# sandbox of that release runs in a Debian root (`hpcjobs sandbox up --release NAME`), and
# pytest runs inside that root too: with the root's own Python in a venv built there once
# (/opt/hpcjobs-venv, rebuilt when pyproject.toml changes), and this checkout bind-mounted at
# its own path and installed editable. Extra arguments go to pytest.
#
# --prepare builds the root, starts its sandbox and builds the venv, and leaves the sandbox
# running (scripts/test.sh does this in the background while the machine's own suite runs);
# --run then runs pytest and stops the sandbox. Without either, both, in one go.
# Each release has its own state folder and ports, so several run side by side.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${HPCJOBS_VENV:-.venv}
repo=$(pwd -P)
release=""
mode=all
while (($#)); do
    case $1 in
        --release) release=$2; shift 2 ;;
        --release=*) release=${1#--release=}; shift ;;
        --prepare) mode=prepare; shift ;;
        --run) mode=run; shift ;;
        *) break ;;
    esac
done
if [[ -z $release ]]; then
    release=$("$venv/bin/python" -c 'from hpcjobs.sandbox.release import host_release, other_release
r = host_release()
print(other_release(r).codename if r else "")')
fi
if [[ -z $release ]]; then
    echo "test: this machine is neither Debian 12 nor 13: the other release is not tested" >&2
    [[ ${CI:-} == true ]] && exit 2
    exit 0
fi
# Each release has its own state folder and ports, so that several run side by side:
# <HPCJOBS_TEST_OTHER_SANDBOX_DIR>-<release>, and HPCJOBS_TEST_OTHER_PORT_BASE plus 1000 per
# release (a sandbox uses fewer than 300 ports).
case $release in
    bookworm) offset=0 ;;
    trixie) offset=1000 ;;
    sid) offset=2000 ;;
    *) echo "test: unknown release $release (bookworm, trixie or sid)" >&2; exit 2 ;;
esac
state=${HPCJOBS_TEST_OTHER_SANDBOX_DIR:-/tmp/hpcjobs-test-sandbox}-$release
ports=$((${HPCJOBS_TEST_OTHER_PORT_BASE:-18810} + offset))
hpcjobs=("$venv/bin/hpcjobs" sandbox)
root=$state/root
rvenv=/opt/hpcjobs-venv
path=$rvenv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
clean=(/usr/bin/env -i "PATH=$path" HOME=/root LANG=C.UTF-8 "TERM=${TERM:-dumb}")
for var in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
    [[ -n ${!var:-} ]] && clean+=("$var=${!var}")
done

prepare() {
    "${hpcjobs[@]}" up --release "$release" --state-dir "$state" --port-base "$ports" \
        --grace-time 15 --bind "$repo" >&2
    # The venv is cached in the root: rebuilt when pyproject.toml changes. The editable install
    # points at one checkout's path: for another checkout (a second clone, CI's fresh clone)
    # only hpcjobs itself is installed again, without its dependencies (seconds).
    local deps
    deps=$(sha256sum <pyproject.toml | cut -c1-16)
    if [[ $(cat "$root$rvenv/.hpcjobs-deps" 2>/dev/null || true) != "$deps" ]]; then
        echo "test: installing hpcjobs and its dev tools into $rvenv in the $release root" >&2
        rm -rf "${root:?}$rvenv"
        chroot "$root" "${clean[@]}" python3 -m venv "$rvenv"
        # No torch here: PyPI has only a multi-GB CUDA build for these Pythons (tests/conftest.py).
        chroot "$root" "${clean[@]}" /usr/bin/env --chdir="$repo" \
            "$rvenv/bin/python" -m pip install -q -e '.[dev]'
        echo "$deps" >"$root$rvenv/.hpcjobs-deps"
        echo "$repo" >"$root$rvenv/.hpcjobs-checkout"
    elif [[ $(cat "$root$rvenv/.hpcjobs-checkout" 2>/dev/null || true) != "$repo" ]]; then
        echo "test: pointing $rvenv in the $release root at $repo" >&2
        chroot "$root" "${clean[@]}" /usr/bin/env --chdir="$repo" \
            "$rvenv/bin/python" -m pip install -q --no-deps -e .
        echo "$repo" >"$root$rvenv/.hpcjobs-checkout"
    fi
}

run() {
    # The live suite, unless test paths were given.
    local arg paths=(tests/live)
    for arg in "$@"; do
        [[ $arg == -* ]] || { paths=(); break; }
    done
    echo "== pytest (live, $release, inside $root)" >&2
    chroot "$root" "${clean[@]}" "CI=${CI:-}" "HPCJOBS_TEST_SANDBOX_DIR=$state/data" \
        HPCJOBS_TEST_OTHER_RELEASE=1 "HPCJOBS_TEST_PORT_BASE=$ports" /usr/bin/env --chdir="$repo" \
        "$rvenv/bin/python" -m pytest -p no:cacheprovider "${paths[@]}" "$@"
}

stop() {
    # Stops the daemons and unmounts everything bound into the root; the root stays cached.
    "${hpcjobs[@]}" down --state-dir "$state" >&2 || true
}

case $mode in
    prepare) prepare ;;
    run) trap stop EXIT; run "$@" ;;
    all)
        was_running=no
        "${hpcjobs[@]}" status --state-dir "$state" >/dev/null 2>&1 && was_running=yes
        [[ $was_running == no ]] && trap stop EXIT
        prepare
        run "$@"
        ;;
esac
