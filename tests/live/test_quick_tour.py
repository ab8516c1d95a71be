"""The README's quick tour, run line for line as a new user would, against the sandbox.

The lines between ``<!-- quick-tour -->`` and ``<!-- /quick-tour -->`` run in one ``bash -e``
from a fresh folder that holds a ``.venv`` and the repository's ``examples`` (so the files the
tour writes stay out of the work tree), with a fresh ``HOME`` and no ``SLURM_CONF``: what the README
tells a newcomer is all the tour gets. ``hpcjobs sandbox up`` finds the test sandbox already
running (``HPCJOBS_SANDBOX_DIR``) and leaves it as it is.

The tour's ``.venv`` is the venv running the tests (``sys.prefix``): the checkout's ``.venv`` on
this machine's release, ``/opt/hpcjobs-venv`` inside the other release's Debian root, where the
checkout has no ``.venv`` of its own (scripts/test-other-release.sh).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hpcjobs.sandbox.cluster import Sandbox

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slurm


def tour_lines() -> str:
    text = (ROOT / "README.md").read_text()
    match = re.search(r"<!-- quick-tour -->\n```bash\n(.*?)```\n<!-- /quick-tour -->", text, re.S)
    assert match, "README.md has no quick-tour block"
    return match.group(1)


def test_readme_names_the_commands_it_promises() -> None:
    lines = tour_lines()
    for command in ("sandbox up", "sandbox env", "submit -f job.yaml", "status", "logs -f"):
        assert f"hpcjobs {command}" in lines


def test_quick_tour_runs_as_written(sandbox: Sandbox, shared_tmp: Path) -> None:
    work = shared_tmp / "tour"
    home = shared_tmp / "tour-home"
    work.mkdir()
    home.mkdir()
    venv = Path(sys.prefix)
    assert (venv / "bin" / "activate").is_file(), f"the tests do not run in a venv ({venv})"
    (work / ".venv").symlink_to(venv)
    (work / "examples").symlink_to(ROOT / "examples")
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("SLURM_", "HPCJOBS_", "VIRTUAL_ENV"))
    }
    env.update(HOME=str(home), HPCJOBS_SANDBOX_DIR=str(sandbox.state_dir))
    script = "set -euo pipefail\nset -x\n" + tour_lines()
    proc = subprocess.run(
        ["bash", "-c", script],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    print(proc.stdout[-4000:], proc.stderr[-4000:], sep="\n")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    out, err = proc.stdout, proc.stderr
    assert "#!/bin/bash" in out  # render printed the script
    assert "final weights digest" in out  # logs -f showed the training to its end
    assert "Result: finish" in out  # history of the chain
    assert "this run already finished" in err  # the same run again
    assert "started over: the old checkpoint folder is now" in err  # --fresh
    runs = home / "hpcjobs" / "runs"
    assert len(list(runs.glob("tour/checkpoints.old-*"))) == 1
    digests = {
        line.split()[-1]
        for log in (runs / "tour").glob("slurm-*.out")
        for line in log.read_text().splitlines()
        if "final weights digest" in line
    }
    assert len(digests) == 1  # the fresh run trained to the same weights
    last, _ = json.JSONDecoder().raw_decode(out[out.rfind("\n{\n") + 1 :])
    assert last["job_id"] and last["run"]["action"] == "new"
