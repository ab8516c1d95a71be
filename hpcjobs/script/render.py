"""Turn a job spec and a site config into a batch script plus the exact ``sbatch`` argv.

Scheduler options travel as ``sbatch`` arguments, which beat both ``#SBATCH`` lines and
inherited ``SBATCH_*`` variables. The script repeats, as ``#SBATCH`` lines, only the options
whose text is made of characters sbatch's directive parser treats literally (see
:func:`is_directive_safe`), so the saved script can also be resubmitted by hand.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, NamedTuple

from hpcjobs.config.models import Partition, SiteConfig, Topology
from hpcjobs.contract.jobenv import (
    ENV_CHECKPOINT_DIR,
    ENV_FINGERPRINT,
    ENV_GPU_INTERVAL,
    ENV_GPU_QUERY,
    ENV_RUN_FILE,
    ENV_SIGNAL,
    GPU_QUERY,
    PORT_BASE,
    PORT_SPAN,
    RUN_FILE,
)
from hpcjobs.contract.names import ENV_OUTPUT_DIR
from hpcjobs.errors import BadInputError
from hpcjobs.jobs.runidentity import fingerprint, run_identity
from hpcjobs.jobs.supervisorapp import supervisor_path
from hpcjobs.runtime.supervisor.cli import ENV_PYTHON
from hpcjobs.runtime.supervisor.deliver import ENV_PROGRAM, ENV_TOKEN
from hpcjobs.runtime.supervisor.policy import Policy, dump
from hpcjobs.script.binding import BindingPlan, plan_binding
from hpcjobs.script.jobspec import JobSpec, Where, resolve_spec
from hpcjobs.script.sbatchopts import check_sbatch_options, is_first_submission_only
from hpcjobs.script.templating import (
    BLOCKS,
    Raw,
    block_file,
    find_template,
    make_environment,
    quote,
    render_template,
    search_path,
)
from hpcjobs.script.tuning import EnvVar, is_tuning_var, tuning_env

#: Characters an ``#SBATCH`` line may hold and still mean exactly what it says: no blanks,
#: quotes, backslashes or ``#`` (which sbatch's directive parser would interpret).
_DIRECTIVE_SAFE = re.compile(r"--[a-z][a-z-]*(=[A-Za-z0-9._:@%/+,=-]+)?")


class RenderedJob(NamedTuple):
    """A rendered job: the script, the ``sbatch`` options, and what they were made from.

    ``sbatch_args`` holds options only: run ``sbatch [--parsable] *sbatch_args SCRIPT``.
    ``blocks`` maps each block (and ``main``) to the template file that served it.
    ``identity`` is what makes this training the same training
    (:func:`hpcjobs.jobs.runidentity.run_identity`); its fingerprint is in the script, and
    the checkpoint folder's RUN file must match it.
    """

    script: str
    sbatch_args: list[str]
    spec: JobSpec
    site_name: str
    output_dir: Path
    blocks: dict[str, str]
    env: list[EnvVar]
    identity: dict[str, Any]
    binding: BindingPlan | None = None
    #: Where the script runs its supervisor from (``hpcjobs submit`` writes it there).
    supervisor: Path | None = None

    def sbatch_argv(self, script_path: str | Path, *, parsable: bool = True) -> list[str]:
        """The full command line that submits this job from ``script_path``."""
        head = ["sbatch", "--parsable"] if parsable else ["sbatch"]
        return [*head, *self.sbatch_args, str(script_path)]


def render_job(
    spec: JobSpec,
    site: SiteConfig,
    *,
    template_dirs: list[Path] | None = None,
    where: Where | None = None,
    array_task_checkpoints: bool = True,
) -> RenderedJob:
    """Render ``spec`` for ``site``.

    Args:
        spec: The job as the user described it (defaults are filled in from the site).
        site: The site config.
        template_dirs: Extra template folders, searched before all others.
        where: Where paths resolve (a remote login node's home and user); default here.
        array_task_checkpoints: Give each task of an array its own checkpoint folder,
            ``<checkpoint dir>/task-<index>`` (the global index, also when the array is split).

    Returns:
        The rendered job.

    Raises:
        BadInputError: The spec does not fit the site (exit 2).
        TemplateError: A template is missing or broken.
    """
    job = resolve_spec(spec, site, where=where)
    assert job.partition is not None and job.launcher is not None
    part = site.partition(job.partition)
    topology = site.topology_for(part)
    extra = check_sbatch_options(job.sbatch_options)
    plan = _plan(job, part, topology)
    tuning = tuning_env(
        site,
        part,
        topology,
        topology_name=part.topology,
        user_env=job.env,
        nccl_debug=job.nccl_debug,
    )
    args = sbatch_args(job, part, extra)
    dirs = search_path(site.name, template_dirs)
    main = f"{job.template}.sh.j2"
    sources = {"main": find_template(main, dirs)}
    sources.update({block: find_template(block_file(block), dirs) for block in BLOCKS})
    identity = run_identity(
        job.command,
        job.env,
        job.container.model_dump() if job.container else None,
        job.chdir or _submit_dir(where),
    )
    context = _context(job, site, part, plan, tuning, args, topology, fingerprint(identity))
    if array_task_checkpoints and job.array:
        context["hpcjobs_env"] = _per_task_checkpoints(context["hpcjobs_env"])
    script = render_template(make_environment(dirs), main, context)
    return RenderedJob(
        script=script,
        sbatch_args=args,
        spec=job,
        site_name=site.name,
        output_dir=Path(job.output_dir or "."),
        blocks={name: str(src.path) for name, src in sources.items() if src is not None},
        binding=plan,
        env=tuning,
        identity=identity,
        supervisor=Path(context["supervisor"]),
    )


def _submit_dir(where: Where | None) -> str:
    """The folder a job without ``--chdir`` runs in: where it is submitted from."""
    if where is not None and where.cwd is not None:
        return str(where.cwd)
    if where is not None and where.home:
        return where.home
    return os.getcwd()


def _node_range(job: JobSpec) -> str:
    """sbatch's ``--nodes``: the job's nodes and spares, a range for an elastic size."""
    spare = job.spare_nodes or 0
    most = job.nodes + spare
    if job.elastic and job.min_nodes is not None:
        return f"{job.min_nodes + spare}-{most}"
    return str(most)


def sbatch_args(job: JobSpec, part: Partition, extra: list[str]) -> list[str]:
    """The ``sbatch`` options of a resolved job, in a fixed order."""
    ranks = job.ntasks_per_node or 1
    cpus = job.cpus_per_task or 1
    if job.launcher == "torchrun":
        tasks, cpus = 1, cpus * ranks
    else:
        tasks = ranks
    array = job.array is not None
    log = "slurm-%A_%a.out" if array else "slurm-%j.out"
    assert job.requeue.signal is not None and job.requeue.lead_time is not None
    if job.elastic:
        # Given tasks per node, Slurm sizes a range's tasks by its fewest nodes and allocates
        # those, even on an idle cluster (measured on 22.05). One task per node holding every
        # CPU of the node's ranks gets as many nodes as are free; each run's step says its own
        # tasks per node.
        per_node = [f"--cpus-per-task={cpus * tasks}"]
    else:
        per_node = [f"--ntasks-per-node={tasks}", f"--cpus-per-task={cpus}"]
    args = [
        f"--job-name={job.name}",
        f"--partition={job.partition}",
        f"--nodes={_node_range(job)}",
        *per_node,
    ]
    if job.gpus_per_node:
        kind = f"{part.gpu_type}:" if part.gpu_type else ""
        args.append(f"--gpus-per-node={kind}{job.gpus_per_node}")
    args.append(f"--time={job.time}")
    if job.account:
        args.append(f"--account={job.account}")
    if job.qos:
        args.append(f"--qos={job.qos}")
    if job.chdir:
        args.append(f"--chdir={job.chdir}")
    args += [
        f"--output={job.output_dir}/{log}",
        "--open-mode=append",
        f"--signal=B:{job.requeue.signal}@{job.requeue.lead_time}",
        "--requeue" if job.requeue.enabled else "--no-requeue",
    ]
    if job.spare_nodes or job.elastic:
        # A failed node leaves the job instead of ending it: a spare takes its place, or the
        # run goes on with fewer nodes.
        args.append("--no-kill")
    if job.array:
        args.append(f"--array={job.array}")
    if job.dependency:
        args.append(f"--dependency={job.dependency}")
    return args + extra


def is_directive_safe(option: str) -> bool:
    """Whether ``option`` reads the same on an ``#SBATCH`` line as on the command line."""
    return bool(_DIRECTIVE_SAFE.fullmatch(option))


def master_port_expr() -> str:
    """The bash arithmetic that derives MASTER_PORT from the job id."""
    # The same number hpcjobs.runtime.distributed.master_port() gives Python code.
    return f"$(( {PORT_BASE} + SLURM_JOB_ID % {PORT_SPAN} ))"


def _plan(job: JobSpec, part: Partition, topology: Topology | None) -> BindingPlan | None:
    if not job.bind or job.launcher == "none" or topology is None:
        return None
    assert part.topology is not None
    return plan_binding(
        topology,
        topology_name=part.topology,
        gpus_per_node=job.gpus_per_node or 0,
        ranks_per_node=job.ntasks_per_node or 1,
    )


def _context(
    job: JobSpec,
    site: SiteConfig,
    part: Partition,
    plan: BindingPlan | None,
    tuning: list[EnvVar],
    args: list[str],
    topology: Topology | None,
    run_print: str,
) -> dict[str, Any]:
    tuned = {var.name: var for var in tuning}
    user_env = [
        EnvVar(k, v, "job") for k, v in job.env.items() if not (is_tuning_var(k) or k in tuned)
    ]
    hpcjobs_env = [
        EnvVar(ENV_OUTPUT_DIR, job.output_dir or "", "hpcjobs"),
        EnvVar(ENV_CHECKPOINT_DIR, job.checkpoint_dir or "", "hpcjobs"),
        EnvVar(ENV_SIGNAL, job.requeue.signal or "", "hpcjobs"),
        EnvVar(ENV_GPU_INTERVAL, str(_gpu_interval(job, site)), "hpcjobs"),
        EnvVar(ENV_GPU_QUERY, GPU_QUERY, "hpcjobs"),
        EnvVar(ENV_FINGERPRINT, run_print, "hpcjobs"),
        EnvVar(ENV_RUN_FILE, f"{job.checkpoint_dir}/{RUN_FILE}", "hpcjobs"),
        EnvVar(ENV_PYTHON, site.setup.python, "hpcjobs"),
    ]
    per_rank_nics = bool(
        plan is not None
        and plan.has_nics
        and tuned.get("NCCL_IB_HCA", EnvVar("", "", "")).origin.startswith("topology")
    )
    signals = [_warning(job)[0]]
    if "TERM" not in signals:
        signals.append("TERM")
    container = _container(job, site)
    return {
        "site": site.name,
        "partition": part.name,
        "topology": part.topology,
        "job": job,
        "launcher": job.launcher,
        "command": job.command,
        "nodes": job.nodes,
        "ranks_per_node": job.ntasks_per_node or 1,
        "cpus_per_rank": job.cpus_per_task or 1,
        "gpus_per_node": job.gpus_per_node or 0,
        "sbatch_args": args,
        # What a continuation job is submitted with, and what the script repeats for a
        # resubmission by hand: neither holds options for the first submission only.
        "continuation_args": [a for a in args if not is_first_submission_only(a)],
        "sbatch_directives": [
            a for a in args if is_directive_safe(a) and not is_first_submission_only(a)
        ],
        "modules": site.setup.modules,
        "setup_lines": [Raw(line) for line in site.setup.lines],
        "user_env": user_env,
        "hpcjobs_env": hpcjobs_env,
        "tuning": tuning,
        "plan": plan,
        "bind": plan is not None,
        "per_rank_nics": per_rank_nics,
        "signal": job.requeue.signal,
        "forward_signals": signals,
        "requeue": job.requeue,
        "faults": _faults(job, site),
        "policy": _policy(job, site, signals, [a for a in args if not is_first_submission_only(a)]),
        "supervisor": str(supervisor_path(job.output_dir or ".")),
        "container": container,
        "torchrun": job.torchrun,
        "master_port_expr": Raw(master_port_expr()),
        "program_env": ENV_PROGRAM,
        "program_token_env": ENV_TOKEN,
        "has_topology": topology is not None,
    }


def _warning(job: JobSpec) -> tuple[str, int]:
    """The warning signal and its lead time, which :func:`resolve_spec` always sets (from the
    job, else the site)."""
    signal, lead = job.requeue.signal, job.requeue.lead_time
    if signal is None or lead is None:
        raise TypeError("render_job needs a job spec from resolve_spec")
    return signal, lead


def _policy(job: JobSpec, site: SiteConfig, signals: list[str], continuation: list[str]) -> str:
    """The supervisor's policy (:mod:`hpcjobs.runtime.supervisor.policy`) as JSON."""
    faults = _faults(job, site)
    requeue = job.requeue
    signal, lead = _warning(job)
    policy = Policy(
        signal=signal,
        lead=lead,
        forward=signals,
        budgets=dict(requeue.max_requeues),
        max_total=requeue.max_total,
        standby=bool(requeue.enabled),
        stall_timeout=faults["stall_timeout"],
        stall_grace=faults["stall_grace"],
        max_excluded=faults["max_excluded_nodes"],
        storm_runs=faults["storm_runs"],
        suspects_file=faults["suspects_file"] or "",
        keep_out_faults=faults["keep_out_faults"],
        keep_out_hours=faults["keep_out_hours"],
        straggler_ratio=faults["straggler_ratio"],
        straggler_window=faults["straggler_window_s"],
        health_check=faults["health_check"] or "",
        health_timeout=faults["health_check_timeout"],
        patterns=list(faults["patterns"]),
        sbatch_args=continuation,
        nodes=job.nodes,
        spare_nodes=job.spare_nodes or 0,
        min_nodes=job.min_nodes or 0,
        node_multiple=job.node_multiple or 1,
        job_expansion=site.slurm.job_expansion,
    )
    return dump(policy)


def _faults(job: JobSpec, site: SiteConfig) -> dict[str, Any]:
    """The fault settings of the job's supervisor (its policy), as the site and the job set them."""
    faults = site.faults
    stall = job.stall_timeout if job.stall_timeout is not None else faults.stall_timeout
    return {
        "stall_timeout": stall,
        "stall_grace": faults.stall_grace,
        "max_excluded_nodes": faults.max_excluded_nodes,
        "storm_runs": job.storm_runs if job.storm_runs is not None else faults.storm_runs,
        "suspects_file": faults.suspects_file,
        "keep_out_faults": faults.keep_out_faults,
        "keep_out_hours": faults.keep_out_hours,
        "straggler_ratio": faults.straggler_ratio,
        "straggler_window_s": faults.straggler_window_s,
        "health_check": faults.health_check,
        "health_check_timeout": faults.health_check_timeout,
        "patterns": list(faults.signatures),
    }


def _gpu_interval(job: JobSpec, site: SiteConfig) -> int:
    """Seconds between GPU samples in the job: the site's interval, 0 (off) without GPUs or
    with ``--no-gpu-monitor``."""
    if not job.gpu_monitor or not job.gpus_per_node:
        return 0
    return site.monitoring.gpu_interval


#: The array task a script runs, numbered globally even when the array was split.
_ARRAY_TASK = '"${HPCJOBS_ARRAY_TASK_ID:-${SLURM_ARRAY_TASK_ID:-0}}"'


def _per_task_checkpoints(env: list[EnvVar]) -> list[EnvVar]:
    """``HPCJOBS_CHECKPOINT_DIR`` with one sub-folder per array task, expanded at run time."""
    out = []
    for var in env:
        if var.name == ENV_CHECKPOINT_DIR and var.value:
            var = EnvVar(var.name, Raw(quote(f"{var.value}/task-") + _ARRAY_TASK), var.origin)
        out.append(var)
    return out


def _container(job: JobSpec, site: SiteConfig) -> dict[str, Any] | None:
    """The container settings for the templates, from the job and the site's defaults.

    ``srun_args`` are srun options (pyxis puts the task in the container); ``prefix`` goes in
    front of the command (enroot, apptainer), inside the binding so the runtime inherits it.
    """
    runtime = site.setup.container.runtime
    if runtime == "none":
        return None
    if job.container is None:
        if not site.setup.container.image:
            return None
        image = site.setup.container.image
        mounts = list(site.setup.container.mounts)
        workdir = None
    else:
        image = job.container.image
        mounts = [*site.setup.container.mounts, *job.container.mounts]
        workdir = job.container.workdir
    srun_args: list[str] = []
    prefix: list[str] = []
    if runtime == "pyxis":
        srun_args.append(f"--container-image={image}")
        if mounts:
            srun_args.append("--container-mounts=" + ",".join(mounts))
        if workdir:
            srun_args.append(f"--container-workdir={workdir}")
    elif runtime == "apptainer":
        prefix = ["apptainer", "exec"]
        if job.gpus_per_node:
            prefix.append("--nv")
        for mount in mounts:
            prefix += ["--bind", mount]
        if workdir:
            prefix += ["--pwd", workdir]
        prefix.append(image)
    else:
        if workdir:
            raise BadInputError(
                "enroot cannot set the container's working directory",
                hint="drop the container workdir, or cd in the command",
            )
        prefix = ["enroot", "start"]
        for mount in mounts:
            prefix += ["--mount", mount]
        prefix.append(image)
    return {
        "runtime": runtime,
        "image": image,
        "mounts": mounts,
        "workdir": workdir,
        "srun_args": srun_args,
        "prefix": prefix,
    }


__all__ = ["RenderedJob", "is_directive_safe", "master_port_expr", "render_job", "sbatch_args"]
