"""``hpcjobs submit`` and ``hpcjobs render``: describe a job, render its script, submit it.

Flags use sbatch's names. A YAML job file (``-f job.yaml``) holds the same fields; flags
override it. ``--dry-run`` prints the script and the sbatch command line, and submits and
writes nothing; ``render`` prints the same and writes the job's supervisor where the script
runs it from, so that the printed script can be given to ``sbatch`` by hand.

``render`` and ``submit --dry-run`` are start-up fast paths (``benchmarks/cli_startup.py``): what
only a real submission, ``--wait`` or a question to Slurm needs is imported in the function that
does it.
"""

from __future__ import annotations

import json
import os
import shlex
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import click

from hpcjobs.cli.common import site_for
from hpcjobs.cli.options import Count, F, NodeRange, host_option, make_runner
from hpcjobs.config.launchers import LAUNCHERS, launcher_help
from hpcjobs.config.loader import load_site
from hpcjobs.errors import BadInputError, HpcJobsError
from hpcjobs.jobs.submission import plan_submission
from hpcjobs.jobs.supervisorapp import ensure_supervisor
from hpcjobs.safetext import require_int
from hpcjobs.script.jobspec import (
    REQUEUE_CAUSES,
    Where,
    load_job_file,
    merge_job_data,
    parse_env_options,
    parse_signal_option,
    parse_spec,
)
from hpcjobs.script.render import render_job

if TYPE_CHECKING:
    from hpcjobs.config.models import SiteConfig
    from hpcjobs.jobs.checkpointclaim import Reuse
    from hpcjobs.jobs.follow import JobEvent
    from hpcjobs.jobs.records import FileStore
    from hpcjobs.jobs.submission import SubmissionPlan
    from hpcjobs.runner import Runner
    from hpcjobs.script.render import RenderedJob
    from hpcjobs.slurm.client import SlurmClient

_SETTINGS: dict[str, Any] = {"allow_interspersed_args": False}


def _job_options(func: F) -> F:
    """The job-spec options shared by ``submit`` and ``render``, group after group."""
    for group in reversed(
        (
            _allocation_options,
            _task_options,
            _environment_options,
            _requeue_options,
            _output_options,
            _launch_options,
        )
    ):
        func = group(func)
    return func


def _stack(func: F, options: list[Callable[[F], F]]) -> F:
    """Apply ``options`` to ``func`` so that they appear in the order given."""
    for option in reversed(options):
        func = option(func)
    return func


def _allocation_options(func: F) -> F:
    """The job file, the name, and what to allocate: partition, nodes, time, account, QoS."""
    return _stack(
        func,
        [
            click.option(
                "-f",
                "--file",
                "job_file",
                type=click.Path(dir_okay=False, path_type=Path),
                help="YAML job file; flags override its fields.",
            ),
            click.option("-J", "--job-name", help="Job name (default: the program's name)."),
            click.option("-p", "--partition", help="Partition (default: the site's)."),
            click.option(
                "-N",
                "--nodes",
                type=NodeRange(),
                help="Number of nodes, or an elastic MIN-MAX range (e.g. 2-4): the job starts "
                "with as many as Slurm gives, and after a node is lost runs again on the nodes "
                "left while they are at least MIN (docs/requeue.md, 'Elastic size').",
            ),
            click.option("-t", "--time", help="Time limit, Slurm syntax (MM, HH:MM:SS, D-HH:MM)."),
            click.option("-A", "--account", help="Account to charge."),
            click.option("-q", "--qos", help="Quality of service."),
        ],
    )


def _task_options(func: F) -> F:
    """The ranks on each node and how they start: GPUs, ranks, CPUs, launcher, array,
    dependency."""
    return _stack(
        func,
        [
            click.option("--gpus-per-node", type=Count(0), help="GPUs per node (default: all)."),
            click.option(
                "--ntasks-per-node",
                type=Count(1),
                help="Ranks per node (default: one per GPU).",
            ),
            click.option("--cpus-per-task", type=Count(1), help="CPUs per rank."),
            click.option(
                "--launcher",
                type=click.Choice(tuple(LAUNCHERS)),
                help=launcher_help(),
            ),
            click.option("--array", help="Job array indices, e.g. 0-15 or 0-99%10."),
            click.option("--dependency", help="Slurm dependency, e.g. afterok:1234."),
        ],
    )


def _environment_options(func: F) -> F:
    """The job's variables and its container."""
    return _stack(
        func,
        [
            click.option(
                "-e", "--env", "env", multiple=True, metavar="NAME=VALUE", help="Set a variable."
            ),
            click.option("--container-image", help="Run in this container image."),
            click.option(
                "--container-mount", multiple=True, metavar="SRC[:DST]", help="Mount into it."
            ),
            click.option("--container-workdir", help="Working directory inside the container."),
        ],
    )


def _requeue_options(func: F) -> F:
    """Checkpoints and recovery: warning signal, requeue budgets, stalls, spare nodes."""
    return _stack(
        func,
        [
            click.option(
                "--checkpoint-dir", help="Checkpoint folder (default: OUTPUT/checkpoints)."
            ),
            click.option(
                "--signal",
                metavar="SIG[@SECONDS]",
                help="Warning signal and lead time before the limit (default: the site's).",
            ),
            click.option(
                "--requeue/--no-requeue",
                default=None,
                help="Let Slurm requeue the job (default on).",
            ),
            click.option(
                "--max-requeues",
                "max_requeues",
                multiple=True,
                metavar="N|CAUSE=N",
                help="Requeue budget: N in total, or CAUSE=N for one cause, e.g. preemption=3, "
                "node_failure=5, infrastructure=2, stall=1 (all causes: docs/requeue.md). "
                "Default: the site's; application failures are not requeued.",
            ),
            click.option(
                "--stall-timeout",
                type=click.IntRange(0, 2**31 - 1),
                metavar="SECONDS",
                help="End and continue a run when a rank's progress report has not advanced "
                "for this long (0: off; default: the site's, faults.stall_timeout). Ranks that "
                "never report progress are never judged.",
            ),
            click.option(
                "--storm-runs",
                type=click.IntRange(0, 1000),
                metavar="N",
                help="Stop the chain once N runs in a row end with the same fault and get no "
                "further (no newer checkpoint, no later step): a restart storm, not worth the "
                "rest of the budget (0: never; default: the site's, faults.storm_runs, 3).",
            ),
            click.option(
                "--spare-nodes",
                type=click.IntRange(0, 2**31 - 1),
                metavar="K",
                help="Hold K nodes beyond -N: a failed or suspect node is replaced by a spare "
                "inside the job, running again within seconds, no queue (default: the "
                "partition's spare_nodes, 0).",
            ),
            click.option(
                "--node-multiple",
                type=click.IntRange(1, 2**31 - 1),
                metavar="K",
                help="With -N MIN-MAX: a run takes a multiple of K nodes (a layout that needs "
                "whole groups of nodes); MIN and MAX must be multiples of K (default: the "
                "partition's node_multiple, 1).",
            ),
        ],
    )


def _output_options(func: F) -> F:
    """Where the job writes and runs, its templates, and extra sbatch options."""
    return _stack(
        func,
        [
            click.option("--output-dir", help="Folder for logs and records (default: the site's)."),
            click.option("-D", "--chdir", help="Working directory of the job."),
            click.option("--template", help="Main template name (default: job)."),
            click.option(
                "--template-dir",
                multiple=True,
                type=click.Path(file_okay=False, path_type=Path),
                help="Extra template folder, searched first.",
            ),
            click.option(
                "--sbatch",
                "sbatch_options",
                multiple=True,
                metavar="--OPTION[=VALUE]",
                help="Pass an extra sbatch option through, e.g. --sbatch=--exclusive.",
            ),
        ],
    )


def _launch_options(func: F) -> F:
    """What runs on the ranks: NCCL debugging, binding, GPU monitor, torchrun, the command."""
    return _stack(
        func,
        [
            click.option(
                "--nccl-debug/--no-nccl-debug",
                default=None,
                help="Turn on NCCL debugging variables (off in production).",
            ),
            click.option(
                "--bind/--no-bind", default=None, help="Per-rank CPU/GPU/NIC binding (default on)."
            ),
            click.option(
                "--gpu-monitor/--no-gpu-monitor",
                default=None,
                help="Sample GPU utilisation with nvidia-smi for 'hpcjobs report' (default on).",
            ),
            click.option(
                "--torchrun", "torchrun_path", help="torchrun program (default: torchrun)."
            ),
            click.argument("command", nargs=-1, type=click.UNPROCESSED),
        ],
    )


@click.command("submit", context_settings=_SETTINGS)
@_job_options
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print the script and sbatch line; submit and write nothing ('render' also writes "
    "the supervisor the script runs, for an sbatch by hand).",
)
@click.option(
    "--after",
    "after",
    multiple=True,
    metavar="JOBID[:afterok|afterany|afternotok]",
    help="Start after another job (default afterok). Repeatable.",
)
@click.option(
    "--wait",
    is_flag=True,
    help="Follow the job (and its continuations) to the end; exit 0 if it completed, "
    "1 if not, 130 on Ctrl-C (the job keeps running).",
)
@click.option(
    "--fresh",
    is_flag=True,
    help="Start this run over: a checkpoint folder left by an earlier run is renamed aside "
    "(never deleted) and the job starts from scratch.",
)
@click.option(
    "--resume",
    is_flag=True,
    help="Continue from the checkpoints in the folder even though another command (or an "
    "older hpcjobs) wrote them; a finished run's done marker is set aside.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the submission as JSON.")
@host_option
@click.pass_context
def submit(
    ctx: click.Context,
    /,
    dry_run: bool,
    after: tuple[str, ...],
    wait: bool,
    fresh: bool,
    resume: bool,
    as_json: bool,
    host: str | None,
    **fields: Any,
) -> None:
    """Render a job script for the site and submit it.

    The command to run goes last, after '--':

    \b
      hpcjobs submit -N 2 -t 4:00:00 -- python train.py --lr 3e-4
      hpcjobs submit -f job.yaml --wait            # follow it to the end
      hpcjobs submit --host login1 -f job.yaml     # submit on a login node over SSH

    The script gets the site's NCCL/UCX settings and per-rank binding, forwards the warning
    signal to the program, and continues the job from its last checkpoint after preemption,
    a timeout or a node failure (docs/requeue.md). Prints the job id, or with --json
    {"job_id": ..., "job_ids": [...], "script": ..., "record": ..., "token": ...}.

    A run is its command, arguments, job variables, container and working directory. The
    same run submitted again continues from its newest checkpoint (or, if it already
    finished, exits at once); a different run never picks up another's checkpoint folder:
    submit refuses, and --fresh or --resume say what to do (docs/requeue.md, "Which run").
    """
    if fresh and resume:
        raise BadInputError(
            "--fresh and --resume contradict each other",
            hint="--fresh starts over, --resume continues from the folder's checkpoints",
        )
    reuse: Reuse | None = "fresh" if fresh else "resume" if resume else None
    site = site_for(ctx, host)
    runner = make_runner(host, site) if host and not dry_run else None
    where = _remote_where(runner) if runner is not None else None
    rendered = _render(ctx, fields, site=site, where=where)
    if dry_run:
        plan = _dry_run_plan(rendered, list(after))
        if host is None:
            _check_run_folder(rendered, reuse)
        _print_dry_run(rendered, plan)
        return
    _submit(
        ctx,
        rendered,
        site=site,
        runner=runner,
        host=host,
        after=list(after),
        wait=wait,
        as_json=as_json,
        reuse=reuse,
    )


@click.command("render", context_settings=_SETTINGS)
@_job_options
@click.pass_context
def render(ctx: click.Context, /, **fields: Any) -> None:
    """Print the job script and sbatch line without submitting; write the supervisor it runs.

    \b
      hpcjobs render -N 2 -t 1:00:00 -- python train.py > job.sh
      sbatch job.sh        # runs, and recovers, as 'hpcjobs submit' would

    The script ends by starting the job's supervisor (docs/requeue.md), a zipapp that render
    writes where the script names it, OUTPUT_DIR/.hpcjobs/supervisor-<hash>.pyz (mode 0600;
    only if it is not there yet), and names on stderr: stdout is the script. Give the script
    to sbatch on this machine or one sharing the output dir; for a login node over SSH, use
    'hpcjobs submit --host'. 'submit --dry-run' prints the same and writes nothing.
    """
    rendered = _render(ctx, fields)
    plan = _dry_run_plan(rendered, [])
    _write_supervisor(rendered)
    _print_dry_run(rendered, plan)


def _write_supervisor(rendered: RenderedJob) -> None:
    """Write the supervisor a rendered script runs, where it runs it from, unless it is there
    (its name is its content's hash) or the script (a template of the user's) never runs it."""
    path: Path | None = rendered.supervisor
    if path is None or (
        str(path) not in rendered.script and shlex.quote(str(path)) not in rendered.script
    ):
        return

    try:
        wrote = ensure_supervisor(path)
    except BadInputError as exc:
        dry = "'hpcjobs submit --dry-run' prints the script and writes nothing"
        exc.hint = f"{exc.hint}; {dry}" if exc.hint else dry
        raise
    said = f"wrote {path}" if wrote else f"{path} is already there"
    click.echo(f"Supervisor: {said} (the script runs it)", err=True)


def _render(
    ctx: click.Context,
    fields: dict[str, Any],
    *,
    site: SiteConfig | None = None,
    where: Where | None = None,
) -> RenderedJob:
    job_file: Path | None = fields.pop("job_file")
    template_dirs: tuple[Path, ...] = fields.pop("template_dir")
    file_data = load_job_file(job_file) if job_file else None
    data = merge_job_data(file_data, flags_to_fields(fields))
    spec = parse_spec(data, source=str(job_file) if job_file else "the command line")
    if site is None:
        site = load_site((ctx.obj or {}).get("site"))
    return render_job(spec, site, template_dirs=list(template_dirs) or None, where=where)


def parse_max_requeues(item: str, current: dict[str, Any]) -> dict[str, Any]:
    """``--max-requeues 5`` (total) or ``--max-requeues preemption=3`` (one cause)."""
    name, sep, value = item.partition("=")
    count = require_int(
        value if sep else name,
        f"--max-requeues {item!r}",
        hint=f"for example --max-requeues 10 or --max-requeues preemption=3; causes: "
        f"{', '.join(REQUEUE_CAUSES)}",
    )
    if not sep:
        return {"max_total": count}
    cause = name.strip().replace("-", "_")
    if cause not in REQUEUE_CAUSES:
        raise BadInputError(
            f"unknown requeue cause {name!r} in --max-requeues",
            hint=f"causes: {', '.join(REQUEUE_CAUSES)}",
        )
    budget = dict(current.get("max_requeues", {}))
    budget[cause] = count
    return {"max_requeues": budget}


def flags_to_fields(flags: dict[str, Any]) -> dict[str, Any]:
    """Map CLI flag values to job spec fields; flags that were not given map to None."""
    requeue: dict[str, Any] = {}
    if flags.get("signal") is not None:
        requeue.update(parse_signal_option(flags["signal"]))
    if flags.get("requeue") is not None:
        requeue["enabled"] = flags["requeue"]
    for item in flags.get("max_requeues") or ():
        requeue.update(parse_max_requeues(item, requeue))
    container: dict[str, Any] | None = None
    if flags.get("container_image") is not None:
        container = {"image": flags["container_image"]}
        if flags.get("container_mount"):
            container["mounts"] = list(flags["container_mount"])
        if flags.get("container_workdir") is not None:
            container["workdir"] = flags["container_workdir"]
    elif flags.get("container_mount") or flags.get("container_workdir"):
        raise BadInputError("--container-mount and --container-workdir need --container-image")
    nodes = flags.get("nodes")
    return {
        "name": flags.get("job_name"),
        "partition": flags.get("partition"),
        "nodes": nodes[1] if nodes else None,
        "min_nodes": nodes[0] if nodes else None,
        "time": flags.get("time"),
        "account": flags.get("account"),
        "qos": flags.get("qos"),
        "gpus_per_node": flags.get("gpus_per_node"),
        "ntasks_per_node": flags.get("ntasks_per_node"),
        "cpus_per_task": flags.get("cpus_per_task"),
        "launcher": flags.get("launcher"),
        "array": flags.get("array"),
        "dependency": flags.get("dependency"),
        "env": parse_env_options(flags.get("env") or ()) or None,
        "container": container,
        "checkpoint_dir": flags.get("checkpoint_dir"),
        "requeue": requeue or None,
        "output_dir": flags.get("output_dir"),
        "chdir": flags.get("chdir"),
        "template": flags.get("template"),
        "sbatch_options": list(flags.get("sbatch_options") or ()) or None,
        "nccl_debug": flags.get("nccl_debug"),
        "bind": flags.get("bind"),
        "gpu_monitor": flags.get("gpu_monitor"),
        "stall_timeout": flags.get("stall_timeout"),
        "storm_runs": flags.get("storm_runs"),
        "spare_nodes": flags.get("spare_nodes"),
        "node_multiple": flags.get("node_multiple"),
        "torchrun": flags.get("torchrun_path"),
        "command": list(flags.get("command") or ()) or None,
    }


#: Stands for the submission's token in a dry run (a new one is drawn for every submission).
DRY_RUN_TOKEN = "<token>"


def dry_run_text(rendered: RenderedJob, plan: SubmissionPlan) -> str:
    """The script, then every sbatch command line the submission would run, as comments.

    The lines are exactly what ``submit`` runs (:meth:`SubmissionPlan.argvs`), with ``<token>``
    for the token drawn at submission and ``SUBMITDIR`` for the folder that keeps the scripts
    (``<output dir>/submit-<time>-<token>/``).
    """
    script: str = rendered.script
    if not script.endswith("\n"):
        script += "\n"
    lines = [
        script,
        "# --- dry run: nothing was submitted; hpcjobs would run"
        " (SUBMITDIR: <output dir>/submit-<time>-<token>) ---\n",
    ]
    for argv in plan.argvs(Path("SUBMITDIR"), DRY_RUN_TOKEN):
        lines.append("# " + shlex.join(argv) + "\n")
    if plan.split:
        lines.append(
            f"# The array does not fit MaxArraySize={plan.max_array_size}: each chunk script is "
            "the script above with HPCJOBS_ARRAY_OFFSET exported after its header.\n"
        )
    return "".join(lines)


def _dry_run_plan(rendered: RenderedJob, after: list[str]) -> SubmissionPlan:
    """The submission plan, with every check ``submit`` makes; Slurm is asked only for
    ``MaxArraySize`` when an array needs it (Slurm's default when it cannot be reached)."""
    try:
        return plan_submission(rendered, client=_LocalSlurm(), after=after)
    except BadInputError:
        raise
    except HpcJobsError:
        click.echo(
            "Note: Slurm could not be asked for MaxArraySize; assuming its default.", err=True
        )
        return plan_submission(rendered, client=None, after=after)


class _LocalSlurm:
    """The local Slurm, loaded only when a dry run has to ask it something."""

    def max_array_size(self) -> int:
        from hpcjobs.runner import LocalRunner
        from hpcjobs.slurm.client import SlurmClient

        return SlurmClient(LocalRunner()).max_array_size()


def _print_dry_run(rendered: RenderedJob, plan: SubmissionPlan) -> None:
    click.echo(dry_run_text(rendered, plan), nl=False)
    inherited = sorted(k for k in os.environ if k.startswith(("SBATCH_", "SALLOC_", "SRUN_")))
    if inherited:
        click.echo(
            "Note: ignoring inherited " + ", ".join(inherited) + " (hpcjobs passes every "
            "option on the sbatch command line and drops these variables when it submits).",
            err=True,
        )


def _remote_where(runner: Runner) -> Where:
    """Home folder and user on the login node, so '~' and relative paths resolve there."""
    home = runner.run(["printenv", "HOME"], timeout=60).stdout.strip()
    user = runner.run(["id", "-un"], timeout=60).stdout.strip()
    return Where(cwd=Path(home), home=home, user=user)


def _submit(
    ctx: click.Context,
    rendered: RenderedJob,
    *,
    site: SiteConfig,
    runner: Runner | None,
    host: str | None,
    after: list[str],
    wait: bool,
    as_json: bool,
    reuse: Reuse | None,
) -> None:
    from hpcjobs.jobs.submit import submit_run
    from hpcjobs.runner import LocalRunner
    from hpcjobs.slurm.backend import make_client

    runner = runner or LocalRunner()
    client = make_client(runner)
    rendered = _without_offenders(rendered, site, runner, client)
    files = cast("FileStore", runner) if host else None  # SshRunner writes over SFTP
    submitted = submit_run(
        rendered,
        client=client,
        runner=runner,
        files=files,
        host=host,
        after=after,
        reuse=reuse,
        on_note=lambda text: click.echo(f"Note: {text}", err=True),
    )
    result, prepared = submitted.result, submitted.folder
    if as_json:
        data = {
            **result.to_dict(),
            "output_dir": str(rendered.output_dir),
            "host": host,
            "checkpoint_dir": prepared.path,
            "run": {"action": prepared.action, "set_aside": prepared.set_aside},
        }
        click.echo(json.dumps(data, indent=2, default=str))
    else:
        for job_id in result.job_ids:
            click.echo(job_id)
    if not wait:
        return
    from hpcjobs.jobs.follow import follow_chain, follow_jobs

    def event(ev: JobEvent) -> None:
        click.echo(f"{_now()} {ev.describe()}", err=True)

    def note(text: str) -> None:
        click.echo(f"{_now()} {text}", err=True)

    try:
        if len(result.job_ids) == 1:
            outcome = follow_chain(
                client,
                runner,
                result.job_ids[0],
                on_event=event,
                on_note=note,
                output_dir=str(rendered.output_dir),
            )
        else:
            outcome = follow_jobs(client, result.job_ids, on_event=event)
    except KeyboardInterrupt:
        click.echo("Stopped following; the job keeps running.", err=True)
        ctx.exit(130)
    if len(result.job_ids) == 1:
        click.echo(
            f"{_now()} {_report_line(client, runner, result.job_ids[0], rendered)}", err=True
        )
    ctx.exit(outcome.exit_code)


def _without_offenders(
    rendered: RenderedJob, site: SiteConfig, runner: Runner, client: SlurmClient
) -> RenderedJob:
    """``rendered``, leaving out the user's repeat offenders (docs/faults.md), with a note on
    what it left out and what it could not."""
    from hpcjobs.jobs import keptout

    offenders = keptout.kept_out(site.faults, runner)
    if not offenders:
        return rendered
    spec = rendered.spec
    partition = spec.partition or site.default_partition.name
    needed = (spec.min_nodes or spec.nodes) + (spec.spare_nodes or 0)
    members = keptout.partition_nodes(client, partition)
    plan = keptout.plan_exclusion(offenders, members, needed, rendered.sbatch_args)
    if plan.nodes:
        until = {k.node: k.until for k in offenders}
        when = ", ".join(f"{n} until {_clock(until[n])}" for n in plan.nodes)
        click.echo(
            f"Note: leaving out repeat offender(s) {when} ('hpcjobs suspects' says why)",
            err=True,
        )
    if plan.refused:
        click.echo(
            f"Note: not leaving out repeat offender(s) {', '.join(plan.refused)}: {plan.why}",
            err=True,
        )
    return rendered._replace(sbatch_args=keptout.with_exclusion(rendered.sbatch_args, plan.nodes))


def _clock(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(epoch))


def _report_line(client: SlurmClient, runner: Runner, root: str, rendered: RenderedJob) -> str:
    """The chain's one-line report (goodput, GPU-hours, biggest badput); never fails submit."""
    from hpcjobs.cli.report import summary_line

    try:
        return summary_line(runner, client, root, str(rendered.output_dir))
    except HpcJobsError as exc:
        return f"Report: not available ({exc.message})"


def _check_run_folder(rendered: RenderedJob, reuse: Reuse | None) -> None:
    """What submitting would do with the checkpoint folder (a dry run: nothing changes)."""
    from hpcjobs.jobs.submit import claim_folder
    from hpcjobs.runner import LocalRunner

    note = claim_folder(
        rendered, client=None, runner=LocalRunner(), reuse=reuse, dry_run=True
    ).note()
    if note:
        click.echo(f"Note: {note}", err=True)


def _now() -> str:
    return time.strftime("%H:%M:%S")


__all__ = ["dry_run_text", "flags_to_fields", "render", "submit"]
