"""Render, then sbatch by hand: the printed script runs as ``hpcjobs submit`` would run it.

``hpcjobs render > job.sh && sbatch job.sh`` is how many people use a script generator. The
script's last line runs the job's supervisor, which render writes where the script names it;
without it the job would fail at once (exit 2, "cannot start the job's supervisor").
"""

from __future__ import annotations

import os
import subprocess

import pytest

from hpcjobs.jobs.supervisorapp import supervisor_path
from tests.live.cluster import HPCJOBS, PYTHON, Cluster, Job

pytestmark = pytest.mark.slurm

#: The program: writes the marker file named by argv[1].
MARK = "import sys; open(sys.argv[1], 'w').write('ran')"


def test_a_rendered_script_runs_under_plain_sbatch(cluster: Cluster) -> None:
    out = cluster.folder / "render-sbatch"
    out.mkdir(mode=0o755)
    marker = out / "marker.txt"
    env = {**os.environ, **cluster.env}
    argv = [HPCJOBS, "--site", "sandbox", "render", "-J", "render-sbatch", "-N", "1"]
    argv += ["--launcher", "none", "--gpus-per-node", "0", "--output-dir", str(out)]
    argv += ["--", PYTHON, "-c", MARK, str(marker)]
    rendered = subprocess.run(
        argv, env=env, cwd=out, capture_output=True, text=True, timeout=120, check=False
    )
    assert rendered.returncode == 0, rendered.stderr
    supervisor = supervisor_path(out)
    assert f"hpcjobs_supervisor={supervisor}\n" in rendered.stdout
    assert f"Supervisor: wrote {supervisor}" in rendered.stderr
    assert supervisor.is_file() and supervisor.stat().st_mode & 0o777 == 0o600
    script = out / "job.sh"
    script.write_text(rendered.stdout, encoding="utf-8")

    # Plain sbatch, from the folder render ran in: no option of hpcjobs' on its command line.
    submitted = subprocess.run(
        ["sbatch", "--parsable", str(script)],
        env=env,
        cwd=out,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip().split(";")[0]
    cluster.jobs.append(job_id)

    job = Job(cluster, job_id, out, steps=0)
    try:
        chain = job.ended(timeout=120)
    except BaseException:
        print(job.log, cluster.explain([job_id]), sep="\n")
        raise
    (run,) = cluster.settled_runs(job_id, 1)
    assert (run["state"], run["exit_code"]) == ("COMPLETED", "0:0"), job.log
    assert chain.final is not None, job.log
    final = (chain.final.event, chain.final.cause, chain.final.detail)
    assert final == ("end", "finish", "completed"), job.log
    assert marker.read_text() == "ran"
