"""``hpcjobs plan``: the parallel layout, memory, step time and cost of a training run.

``--history``, ``--from-run`` and ``--apply`` import what only they need where they run, so a
plan loads no Slurm client (docs/plan.md, "Speed").
"""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from hpcjobs.cli.options import Count
from hpcjobs.config.loader import load_site
from hpcjobs.errors import BadInputError, ConfigError
from hpcjobs.plan import inputs
from hpcjobs.plan.catalogue import CATALOGUE
from hpcjobs.plan.compare import compare_rows
from hpcjobs.plan.export import candidate_data, cost_data, hardware_data, model_data
from hpcjobs.plan.faults import (
    CHECKPOINT_MINUTES,
    REQUEUE_MINUTES,
    RESTART_MINUTES,
    fault_model,
    interruption_data,
    measured_fault_model,
)
from hpcjobs.plan.search import Fixed, Request, distinct, search
from hpcjobs.safetext import require_safe
from hpcjobs.texttable import table

if TYPE_CHECKING:
    from hpcjobs.config.models import SiteConfig
    from hpcjobs.plan.faults import FaultModel
    from hpcjobs.plan.inputs import Resources, Target
    from hpcjobs.plan.model import ModelSpec, Recompute
    from hpcjobs.plan.search import Candidate, Result


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--params", metavar="N", help="Parameter count: 70B, 1.5T, 7e9 or digits.")
@click.option("--layers", type=Count(1), help="Transformer layers (l).")
@click.option("--hidden", type=Count(1), help="Hidden size (h).")
@click.option("--heads", type=Count(1), help="Attention heads (a).")
@click.option("--vocab", type=Count(1), help="Vocabulary size (V).")
@click.option("--seq-len", type=Count(1), help="Sequence length (s).")
@click.option(
    "--model-config",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A Hugging Face style config.json (layers, hidden, heads, vocab, positions).",
)
@click.option("--tokens", metavar="N", help="Training tokens: 300B, 2T, 1e12.")
@click.option("--global-batch", type=Count(1), help="Sequences per step (required).")
@click.option("--micro-batch", type=Count(1), help="Sequences per micro-batch (default: try 1-8).")
@click.option(
    "--precision", type=click.Choice(["bf16", "fp16", "fp32"]), default="bf16", show_default=True
)
@click.option("--gpus", type=Count(1), help="GPUs to plan for (whole nodes beyond one).")
@click.option(
    "-N",
    "--nodes",
    "nodes_text",
    metavar="N[,N...]",
    help="Nodes to plan for (all their GPUs); several (16,32,64) or a doubling range (16-128) "
    "compare node counts.",
)
@click.option(
    "--spare-nodes",
    type=Count(0),
    metavar="K",
    help="Spare nodes held beside the run, for recovery without a queue (default: the "
    "partition's); shows what they cost.",
)
@click.option("-p", "--partition", help="Partition (default: the site's).")
@click.option(
    "--partitions",
    "partitions_text",
    metavar="A,B|all",
    help="Compare partitions (all: every partition with GPU facts).",
)
@click.option("--gpu-type", metavar="NAME", help="Plan on the site's partition with this GPU type.")
@click.option(
    "--gpu",
    "gpu_text",
    metavar="NAME[,NAME...]",
    help="Plan on GPUs of the built-in catalogue instead of a partition (H100, H200, B200, A100, "
    "L40S, MI300X, 910B); several compare them. --list-gpus shows their figures and sources.",
)
@click.option("--list-gpus", is_flag=True, help="Print the GPU catalogue with sources and exit.")
@click.option(
    "--mfu",
    type=float,
    help="Share of the dense peak the compute achieves (default 0.4); the pipeline bubble and "
    "the data-parallel all-reduce are added on top.",
)
@click.option(
    "--achieved-tflops",
    type=float,
    metavar="X",
    help="TFLOP/s per GPU a whole iteration achieves, end to end (bubble and communication "
    "inside it, as Megatron-LM reports it): the step is FLOPs / (GPUs x X), nothing added.",
)
@click.option(
    "--from-run",
    metavar="JOBID",
    help="Use the end-to-end speed a finished run here measured.",
)
@click.option(
    "--mttf",
    type=float,
    metavar="HOURS",
    help="Mean hours between interruptions of the whole run, the same for every size compared "
    "(default: a measured rate per GPU, scaled to the GPUs planned; docs/plan.md).",
)
@click.option(
    "--history",
    metavar="SINCE",
    help="Measure the interruption rate and what each cost from your own chains since SINCE "
    "(sacct syntax, e.g. now-30days; one sacct), instead of the default rate.",
)
@click.option(
    "--checkpoint-minutes",
    type=float,
    help=f"Checkpoint interval: an interruption loses half of it on average (default "
    f"{CHECKPOINT_MINUTES:g}).",
)
@click.option(
    "--restart-minutes",
    type=float,
    help=f"Time to restart from a checkpoint after an interruption (default {RESTART_MINUTES:g}).",
)
@click.option(
    "--requeue-minutes",
    type=float,
    help=f"Queue wait for the next allocation after an interruption, paid in days, not money; "
    f"none with spare nodes (default {REQUEUE_MINUTES:g}).",
)
@click.option("--layout", "layout_text", metavar="tp=T,pp=P", help="Fix tp, pp (dp, mb, sp).")
@click.option("--zero", type=Count(0, 3), help="Fix the ZeRO stage (0-3).")
@click.option("--recompute", type=click.Choice(["none", "selective", "full"]), help="Fix it.")
@click.option("--top", type=Count(1, 100), default=5, show_default=True, help="Layouts shown.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (bytes, seconds, FLOP/s).")
@click.option(
    "--apply",
    "apply_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write a job file for the best (or the fixed) layout.",
)
@click.option("--force", is_flag=True, help="Let --apply replace an existing file.")
@click.option("-J", "--job-name", help="Job name for --apply (default: planned).")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def plan(ctx: click.Context, /, **opts: Any) -> None:
    """Pick the parallel layout of a training run and say how long and how much.

    The model is --params N, or its shape (--layers --hidden --heads --vocab --seq-len, or
    --model-config config.json); the run is --tokens and --global-batch. Every layout
    (TP x PP x DP, ZeRO 0-3, recomputation, sequence parallelism) on --gpus/--nodes GPUs of
    the partition is sized (parameters, gradients, optimizer states, activations, allowance);
    those that fit are ranked by step time (compute at --mfu, pipeline bubble, data-parallel
    all-reduce). Shown: the best few, with total days, GPU-hours and time-limit chunks.

    --layout/--zero/--recompute fix choices; a fully fixed layout is reported even when it
    does not fit. --apply job.yaml writes a job file for the chosen layout (COMMAND after
    '--' becomes its command), ready for 'hpcjobs submit -f job.yaml'.

    Speed: --mfu is the compute's share of the peak, with bubble and all-reduce modelled on
    top; --achieved-tflops (and --from-run) is an end-to-end rate, which already contains them.

    Compare: several --nodes, --partitions or --gpu give one table, a row per choice with its
    best layout, days, GPU-hours, cost (from the partition's price) and scaling efficiency, the
    fastest and the cheapest marked. A size beyond the partition is planned and said. See
    docs/plan.md.
    """
    if opts["list_gpus"]:
        _print_catalogue(opts["as_json"])
        return
    _check_flags(opts)
    site = _site(ctx, opts)
    node_counts: list[int | None] = (
        [*inputs.parse_node_counts(opts["nodes_text"])] if opts["nodes_text"] else [None]
    )
    targets = inputs.parse_targets(site, opts["partitions_text"], opts["gpu_text"])
    if len(node_counts) > 1 or len(targets) > 1:
        _compare(site, opts, targets, node_counts)
        return
    target = targets[0]
    data, request, chosen = _plan_one(
        site,
        opts,
        partition=target.partition or opts["partition"],
        gpu=target.gpu,
        nodes=node_counts[0],
        history=_history(ctx, opts["history"]),
    )
    _apply_and_print(opts, data, request, chosen)


def _check_flags(opts: dict[str, Any]) -> None:
    """Refuse a plan without its required flags, or with flags that contradict each other."""
    for flag, key in (("--tokens", "tokens"), ("--global-batch", "global_batch")):
        if opts[key] is None:
            raise BadInputError(f"{flag} is required", hint="see 'hpcjobs plan --help'")
    if (opts["partitions_text"] or opts["gpu_text"]) and (
        opts["partition"] is not None or opts["gpu_type"] is not None
    ):
        raise BadInputError(
            "give -p/--gpu-type (one partition) or --partitions/--gpu (a choice), not both",
            hint="for several partitions: --partitions a,b",
        )
    if opts["history"] is not None and opts["mttf"] is not None:
        raise BadInputError("give --mttf or --history, not both")
    if opts["gpu_text"] and opts["apply_path"] is not None:
        raise BadInputError(
            "--apply writes a job for a partition of the site, not for a catalogue GPU",
            hint="plan on the partition with -p NAME --apply job.yaml",
        )


def _apply_and_print(
    opts: dict[str, Any], data: dict[str, Any], request: Request, chosen: Candidate
) -> None:
    """Write the --apply job file if asked, print the plan (text or JSON), then say what was
    written."""
    applied = None
    if opts["apply_path"] is not None:
        applied = _apply(
            opts,
            request,
            chosen,
            data["inputs"]["partition"],
            request.hardware.gpus_per_node,
            data["inputs"]["spare_nodes"],
        )
    data["applied"] = None if applied is None else str(applied)
    if opts["as_json"]:
        click.echo(json.dumps(data, indent=2))
    else:
        _print_plan(data, request)
    if applied is not None:
        click.echo(f"Wrote {applied}: hpcjobs submit -f {applied}", err=True)
        if not opts["command"]:
            click.echo(
                f"Hint: it has no command yet: hpcjobs submit -f {applied} -- python train.py",
                err=True,
            )


#: Said when an achieved rate (--achieved-tflops, --from-run) replaces the step model.
_ACHIEVED_RATE_NOTE = (
    "an achieved rate gives every layout with the same recomputation the same step "
    "time: they are ranked by ZeRO stage, recomputation and memory (--mfu ranks them "
    "by speed)"
)


def _plan_one(
    site: SiteConfig | None,
    opts: dict[str, Any],
    *,
    partition: str | None,
    gpu: str | None,
    nodes: int | None,
    quiet: bool = False,
    history: list[dict[str, Any]] | None = None,
) -> tuple[dict[str, Any], Request, Candidate]:
    """One plan: the model, the GPUs, the speed, the layouts; its JSON data, request and the
    layout shown first. ``quiet``: no layout fits is a row that says so (compare), not an error.
    """
    model = _model(opts)
    tokens = inputs.parse_quantity(opts["tokens"], "--tokens")
    precision = opts["precision"]
    res = inputs.resolve_resources(
        site,
        partition=partition,
        gpu_type=None if gpu else opts["gpu_type"],
        gpus=opts["gpus"],
        nodes=nodes,
        precision=precision,
        gpu=gpu,
    )
    spares, spare_note = inputs.spare_nodes_for(res, opts["spare_nodes"])
    notes = [*res.notes, *([spare_note] if spare_note else [])]
    recompute = inputs.recompute_value(opts["recompute"])
    efficiency, achieved, from_run = _speed(opts, model, res, recompute)
    if achieved is not None:
        notes.append(_ACHIEVED_RATE_NOTE)
    fixed = _fixed_choices(opts, recompute)
    request = Request(
        model=model,
        hardware=res.hardware,
        gpus=res.gpus,
        global_batch=opts["global_batch"],
        tokens=tokens,
        precision=precision,
        efficiency=efficiency,
        fixed=fixed,
        spare_gpus=spares * res.hardware.gpus_per_node,
        achieved_flops=None if achieved is None else achieved * 1e12,
    )
    result = search(request)
    fitting = result.fitting
    if not quiet:
        _refuse_when_none_fits(result, fitting, fixed, res.gpus)
    shown = distinct(fitting, opts["top"]) if fitting else result.candidates[:1]
    faults, history_note = _fault_model(opts, res.gpus, history)
    if history_note is not None:
        notes.append(history_note)
    layouts = _layouts_data(request, res, shown, faults, spares)
    data = {
        "inputs": {
            **_inputs_echo(opts, site.name if site else None, res.label, res.gpus, tokens),
            "nodes": res.nodes,
            "gpu": gpu,
            "spare_nodes": spares,
        },
        "model": model_data(model),
        "hardware": hardware_data(res.hardware),
        "price": None if res.price is None else res.price.model_dump(),
        "speed": "end_to_end" if achieved is not None else "mfu",
        "efficiency": efficiency,
        "flops_per_gpu": efficiency * res.hardware.peak_flops,
        "from_run": from_run,
        "notes": notes,
        "evaluated": result.evaluated,
        "fitting": len(fitting),
        "layouts": layouts,
    }
    return data, request, shown[0]


def _model(opts: dict[str, Any]) -> ModelSpec:
    """The model: --params, the shape flags and/or --model-config."""
    return inputs.resolve_model(
        params=opts["params"],
        layers=opts["layers"],
        hidden=opts["hidden"],
        heads=opts["heads"],
        vocab=opts["vocab"],
        seq_len=opts["seq_len"],
        model_config=opts["model_config"],
    )


def _speed(
    opts: dict[str, Any], model: ModelSpec, res: Resources, recompute: Recompute | None
) -> tuple[float, float | None, dict[str, Any] | None]:
    """The share of peak, the achieved TFLOP/s per GPU (None: --mfu) and the run --from-run
    measured it on (None: not asked for)."""
    from_run: dict[str, Any] | None = None
    if opts["from_run"] is not None:
        if opts["mfu"] is not None or opts["achieved_tflops"] is not None:
            raise BadInputError("give one of --mfu, --achieved-tflops and --from-run")
        from hpcjobs.plan.fromrun import achieved_flops_per_gpu, measure_run

        run = measure_run(require_safe(opts["from_run"], "--from-run"))
        rate, from_run = achieved_flops_per_gpu(
            run, model, global_batch=opts["global_batch"], recompute=recompute or "selective"
        )
        achieved: float | None = rate / 1e12
    else:
        achieved = opts["achieved_tflops"]
    try:
        efficiency = inputs.efficiency_from(
            mfu=opts["mfu"], achieved_tflops=achieved, peak_flops=res.hardware.peak_flops
        )
    except BadInputError as exc:
        if from_run is not None:
            exc.message = f"--from-run {from_run['job_id']}: {exc.message}"
        raise
    return efficiency, achieved, from_run


def _fixed_choices(opts: dict[str, Any], recompute: Recompute | None) -> Fixed:
    """The layout choices fixed by --layout, --micro-batch, --zero and --recompute."""
    fixed = Fixed()
    if opts["layout_text"]:
        fixed = inputs.parse_layout(opts["layout_text"])
    return Fixed(
        tp=fixed.tp,
        pp=fixed.pp,
        dp=fixed.dp,
        micro_batch=fixed.micro_batch or opts["micro_batch"],
        zero=opts["zero"],
        recompute=recompute,
        sp=fixed.sp,
    )


def _refuse_when_none_fits(
    result: Result, fitting: list[Candidate], fixed: Fixed, gpus: int
) -> None:
    """Refuse a search free to choose tp, ZeRO and recomputation in which no layout fits."""
    constrained = fixed.tp is not None or fixed.zero is not None or fixed.recompute is not None
    if fitting or constrained:
        return
    smallest = min(result.candidates, key=lambda c: c.memory.total)
    raise BadInputError(
        f"no layout of {gpus} GPUs fits: the smallest, {smallest.layout.label()}, "
        f"{smallest.notes[0]}",
        hint="plan for more GPUs (--nodes), a smaller --micro-batch, or see one layout "
        "with --layout tp=T,pp=P --zero Z --recompute full",
    )


def _fault_model(
    opts: dict[str, Any], gpus: int, history: list[dict[str, Any]] | None
) -> tuple[FaultModel, str | None]:
    """The interruption model (the flags, else what --history measured, else the default)
    and a note when the history had nothing to measure."""
    minutes = {  # the flags given (None: the model's default, or what --history measured)
        "checkpoint_minutes": inputs.positive(opts["checkpoint_minutes"], "--checkpoint-minutes"),
        "restart_minutes": inputs.not_negative(opts["restart_minutes"], "--restart-minutes"),
        "requeue_minutes": inputs.not_negative(opts["requeue_minutes"], "--requeue-minutes"),
    }
    faults = fault_model(
        gpus,
        mttf_h=inputs.positive(opts["mttf"], "--mttf"),
        **{key: value for key, value in minutes.items() if value is not None},
    )
    if history is None:
        return faults, None
    measured, what = measured_fault_model(history, gpus, since=opts["history"])
    if measured is None:
        return faults, f"history: {what}: nothing to measure a rate from; the default is used"
    given = {k: v / 60 for k, v in minutes.items() if v is not None}  # the user's flags win
    measured_with_flags = replace(
        measured,
        checkpoint_h=given.get("checkpoint_minutes", measured.checkpoint_h),
        restart_h=given.get("restart_minutes", measured.restart_h),
        requeue_h=given.get("requeue_minutes", measured.requeue_h),
    )
    return measured_with_flags, None


def _layouts_data(
    request: Request, res: Resources, shown: list[Candidate], faults: FaultModel, spares: int
) -> list[dict[str, Any]]:
    """Each layout shown as JSON-ready data, with its cost and its interruption figures."""
    layouts = []
    for cand in shown:
        item = candidate_data(request, cand)
        item["cost"] = cost_data(res, cand)
        item["interruptions"] = interruption_data(
            cand.cost.total_s,
            res.gpus,
            faults,
            spare_nodes=spares,
            gpus_per_node=res.hardware.gpus_per_node,
            gpu_hour_price=res.gpu_hour_price,
        )
        layouts.append(item)
    return layouts


def _site(ctx: click.Context, opts: dict[str, Any]) -> SiteConfig | None:
    """The site config; None when only catalogue GPUs are planned and no site is found (a
    plan for GPUs one rents needs none)."""
    named = (ctx.obj or {}).get("site")
    if named is not None or not opts["gpu_text"] or opts["partitions_text"]:
        return load_site(named)
    try:
        return load_site(None)
    except ConfigError:
        return None


def _history(ctx: click.Context, since: str | None) -> list[dict[str, Any]] | None:
    """``report --json``'s chains of this user since ``since`` (None: not asked for)."""
    if since is None:
        return None
    import getpass

    from hpcjobs.cli.common import slurm_access
    from hpcjobs.cli.report import gather

    runner, client = slurm_access(ctx, None)
    reports = gather(
        runner, client, [], None, user=getpass.getuser(), since=require_safe(since, "--history")
    )
    return [report.to_dict() for report in reports]


def _compare(
    site: SiteConfig | None,
    opts: dict[str, Any],
    targets: list[Target],
    node_counts: list[int | None],
) -> None:
    """One row per (partition or GPU, node count): its best layout, days, GPU-hours, cost."""
    if opts["apply_path"] is not None:
        raise BadInputError(
            "--apply writes one layout: plan one partition and one node count with it",
            hint="compare first, then plan the chosen one with -p P -N N --apply job.yaml",
        )
    if opts["from_run"] is not None:
        raise BadInputError("--from-run measured one partition's GPUs: compare with --mfu")
    if opts["achieved_tflops"] is not None:
        raise BadInputError(
            "an achieved rate was measured on one GPU model at one size: it cannot say how "
            "another size or GPU would do",
            hint="compare with --mfu (the share of each GPU's own peak), which models the "
            "bubble and the all-reduce at each size",
        )
    if node_counts == [None] and opts["gpus"] is None:
        raise BadInputError("give the nodes to compare: -N 16,32,64 or -N 16-128")
    history = _history(click.get_current_context(), opts["history"])
    plans = []
    for target in targets:
        for nodes in node_counts:
            data, _, _ = _plan_one(
                site,
                opts,
                partition=target.partition or opts["partition"],
                gpu=target.gpu,
                nodes=nodes,
                quiet=True,
                history=history,
            )
            plans.append(data)
    rows = compare_rows(plans)
    if opts["as_json"]:
        click.echo(json.dumps({"comparison": rows, "plans": plans}, indent=2))
        return
    _print_comparison(rows, plans)


def _print_interruptions(item: dict[str, Any], price: dict[str, Any] | None) -> None:
    """What interruptions would cost layout #1, and what a spare node or shorter checkpoints
    would change."""
    faults, training = item["interruptions"], item["training"]
    currency = "" if price is None else f" {price['currency']}"

    def outcome(figures: dict[str, Any]) -> str:
        if figures["days"] is None:
            return "never ends (an interruption costs more than the time between two)"
        text = f"{figures['days']:.2f} days"
        if figures["cost"] is not None:
            text += f", {figures['cost']:,.0f}{currency}"
        return text

    requeue = f", queue wait {faults['requeue_h'] * 60:.3g}" if faults["requeue_h"] else ""
    click.echo(
        f"Interruptions: one per {faults['mttf_h']:,.1f} h at this size; each costs "
        f"{faults['per_interruption_h'] * 60:.3g} min (work redone "
        f"{faults['checkpoint_interval_h'] * 30:.3g}: half the checkpoint interval, restart "
        f"{faults['restart_h'] * 60:.3g}{requeue})."
    )
    expected = (
        "-"
        if faults["expected"] is None
        else f"{faults['expected']:,.1f}"
        if faults["expected"] < 10
        else f"{faults['expected']:,.0f}"
    )
    base = f"{training['days']:.2f} days"
    if item["cost"] is not None:
        base += f", {item['cost']['total']:,.0f}{currency}"
    click.echo(f"  #1 with them: {expected} expected, {outcome(faults)} (without: {base})")
    what_if = faults["what_if"]
    if "one_spare_node" in what_if:
        click.echo(
            f"  with one spare node: {outcome(what_if['one_spare_node'])} (at best: as if every "
            "interruption were recovered inside the job, without a queue wait)"
        )
    click.echo(
        "  an elastic size (-N MIN-MAX) instead: runs on after a lost node without a queue wait; "
        "grows back by moving to a larger job once the nodes are free beside it (Slurm adds no "
        'nodes to a running GPU job: docs/requeue.md, "Growing back")'
    )
    shorter = faults["checkpoint_interval_h"] * 60 / 3
    click.echo(
        f"  checkpointing every {shorter:.3g} min: "
        f"{outcome(what_if['checkpoint_interval_third'])} (not counting the time to write more "
        "checkpoints)"
    )
    click.echo(f"  (rate: {faults['source']})")


def _print_catalogue(as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps({k: asdict(v) for k, v in CATALOGUE.items()}, indent=2))
        return
    rows = [
        [
            g.key,
            g.model,
            f"{g.bf16_tflops:g}",
            f"{g.memory_bytes / 1e9:g}",
            f"{g.gpus_per_node}",
            f"{g.nvlink_domain}",
            "-" if g.nvlink_gbyte_s is None else f"{g.nvlink_gbyte_s:g}",
            f"{g.internode_gbit_s:g}",
        ]
        for g in CATALOGUE.values()
    ]
    headers = ["GPU", "MODEL", "BF16 TFLOP/S", "GB", "PER NODE", "NVLINK DOMAIN"]
    click.echo(table([*headers, "NVLINK GB/S", "NET GBIT/S"], rows))
    click.echo("\nDense peak rates; link rates per direction, per GPU. Sources:")
    for g in CATALOGUE.values():
        for what, source in g.sources.items():
            click.echo(f"  {g.key} {what}: {source}")


def _print_comparison(rows: list[dict[str, Any]], plans: list[dict[str, Any]]) -> None:
    first = plans[0]
    model, inp = first["model"], first["inputs"]
    click.echo(
        f"Model: {model['params'] / 1e9:.2f}B parameters, {inp['tokens'] / 1e9:g}B tokens, "
        f"global batch {inp['global_batch']} x {model['seq_len']}, {inp['precision']}"
    )
    speed = "end to end" if first["speed"] == "end_to_end" else "compute share of each peak"
    click.echo(f"Speed: {first['efficiency'] * 100:.1f}% ({speed})")
    click.echo()
    table_rows = []
    for row in rows:
        marks = ", ".join(row["marks"])
        cost = "-" if row["cost"] is None else f"{row['cost']:,.0f} {row['currency']}"
        scaling = "-" if row["scaling_efficiency"] is None else f"{row['scaling_efficiency']:.0%}"
        faulty = row["with_interruptions"]
        table_rows.append(
            [
                row["target"],
                row["gpu"],
                str(row["nodes"]),
                row["layout"] or "none fits",
                "-" if row["days"] is None else f"{row['days']:.2f}",
                "-" if row["gpu_hours"] is None else f"{row['gpu_hours']:,.0f}",
                cost,
                "-" if row["mfu"] is None else f"{row['mfu'] * 100:.1f}%",
                scaling,
                "-" if faulty["days"] is None else f"{faulty['days']:.2f}",
                "-" if faulty["cost"] is None else f"{faulty['cost']:,.0f}",
                marks,
            ]
        )
    headers = ["PARTITION", "GPU", "NODES", "BEST LAYOUT", "DAYS", "GPU-HOURS", "COST", "MFU"]
    click.echo(table([*headers, "SCALING", "DAYS+FAULTS", "COST+FAULTS", ""], table_rows))
    click.echo()
    click.echo(
        "SCALING: speed per GPU against the fewest nodes of the same partition (100% = adding "
        "nodes shortens the run in proportion; lower = more nodes stop paying). +FAULTS: with "
        "the interruptions expected at that size (see a single plan's 'Interruptions' line); "
        "the marks go by them."
    )
    for plan in plans:
        for note in plan["notes"]:
            click.echo(f"Note: {plan['inputs']['partition']}: {note}")


def _apply(
    opts: dict[str, Any],
    request: Request,
    chosen: Candidate,
    partition: str,
    per_node: int,
    spares: int,
) -> Path:
    from hpcjobs.plan.jobfile import job_data, write_job_file

    data = job_data(
        chosen.layout,
        partition=partition,
        gpus_per_node=per_node,
        global_batch=request.global_batch,
        seq_len=request.model.shape.seq_len,
        precision=request.precision,
        command=opts["command"],
        name=opts["job_name"],
        # Written when asked for or the partition's default: a job file says what it holds.
        spare_nodes=spares if spares or opts["spare_nodes"] is not None else None,
    )
    fit = "fits" if chosen.fits else "DOES NOT FIT: " + "; ".join(chosen.notes)
    held = f" (+{chosen.cost.spare_gpu_hours:,.0f} held by {spares} spare node(s))"
    header = (
        f"Planned by 'hpcjobs plan': {chosen.layout.label()} ({fit}).\n"
        f"Step {chosen.step.total_s:.3f} s, {chosen.cost.days:.2f} days, "
        f"{chosen.cost.gpu_hours:,.0f} GPU-hours"
        + (held if spares else "")
        + ". Submit: hpcjobs submit -f FILE"
    )
    path: Path = opts["apply_path"]
    return write_job_file(path, data, header=header, force=opts["force"])


def _inputs_echo(
    opts: dict[str, Any], site: str | None, partition: str, gpus: int, tokens: int
) -> dict[str, Any]:
    keys = (
        "params",
        "layers",
        "hidden",
        "heads",
        "vocab",
        "seq_len",
        "global_batch",
        "micro_batch",
        "precision",
        "gpu_type",
        "mfu",
        "achieved_tflops",
        "from_run",
        "layout_text",
        "zero",
        "recompute",
    )
    echo: dict[str, Any] = {k: opts[k] for k in keys}
    echo["layout"] = echo.pop("layout_text")
    if opts["params"] is not None:
        echo["params"] = inputs.parse_quantity(opts["params"], "--params")
    echo["model_config"] = None if opts["model_config"] is None else str(opts["model_config"])
    echo.update(site=site, partition=partition, gpus=gpus, tokens=tokens)
    return echo


def _gb(value: int) -> str:
    return f"{value / 1e9:.1f}"


def _duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.2f} s"
    return f"{seconds / 60:.1f} min"


def _print_plan(data: dict[str, Any], request: Request) -> None:
    """A single plan as text: what it is for, the layouts, and each layout's breakdown."""
    _print_model_and_gpus(data)
    click.echo(f"Speed: {_speed_text(data)}")
    price = data["price"]
    if price is not None:
        _print_price(price)
    for note in data["notes"]:
        click.echo(f"Note: {note}")
    click.echo(f"Layouts: {data['evaluated']} evaluated, {data['fitting']} fit")
    click.echo()
    click.echo(_layout_table(data["layouts"], price))
    if data["layouts"]:
        _print_interruptions(data["layouts"][0], price)
    _print_spare_nodes(data)
    for n, item in enumerate(data["layouts"], 1):
        _print_breakdown(n, item, end_to_end=data["speed"] == "end_to_end")
    if data["layouts"] and data["layouts"][0]["training"]["time_limit_chunks"]:
        limit = request.hardware.max_time_s or 0
        click.echo()
        click.echo(
            f"Chunks: runs of at most the partition's time limit ({limit / 3600:g} h) "
            "each, chained by requeue."
        )


def _print_model_and_gpus(data: dict[str, Any]) -> None:
    """The Model, Run and GPUs lines of a plan."""
    model, hw, inp = data["model"], data["hardware"], data["inputs"]
    shape = (
        f"{model['layers']} layers, h={model['hidden']}, {model['heads']} heads, "
        f"V={model['vocab']}, s={model['seq_len']}"
    )
    if model["shape_assumed"]:
        shape = f"shape assumed from the count: {shape}"
    click.echo(f"Model: {model['params'] / 1e9:.2f}B parameters ({shape}), {inp['precision']}")
    click.echo(
        f"Run: {inp['tokens'] / 1e9:g}B tokens, global batch {inp['global_batch']} x "
        f"{model['seq_len']} tokens"
    )
    nodes = max(1, inp["gpus"] // hw["gpus_per_node"])
    where = (
        f"{nodes} node(s) of {hw['gpus_per_node']}, figures from the built-in catalogue"
        if inp["gpu"]
        else f"{nodes} node(s), partition {inp['partition']} of site {inp['site']}"
    )
    click.echo(
        f"GPUs: {inp['gpus']} x {hw['gpu']} ({where}): "
        f"{hw['peak_flops_per_gpu'] / 1e12:g} TFLOP/s dense peak, "
        f"{_gb(hw['memory_bytes'])} GB, NVLink domain {hw['nvlink_domain']}, "
        f"{hw['internode_bytes_per_s'] * 8 / 1e9:g} Gbit/s per GPU between nodes"
    )


def _speed_text(data: dict[str, Any]) -> str:
    """What the Speed line says: the rate, how it is used, and the run that measured it."""
    if data["speed"] == "end_to_end":
        speed = (
            f"{data['flops_per_gpu'] / 1e12:.1f} TFLOP/s per GPU end to end ("
            f"{data['efficiency'] * 100:.1f}% of peak; pipeline bubble and communication are "
            "inside this rate, nothing is added to it)"
        )
    else:
        speed = (
            f"{data['efficiency'] * 100:.1f}% of peak ({data['flops_per_gpu'] / 1e12:.1f} "
            "TFLOP/s per GPU on the FLOPs executed; bubble and all-reduce added)"
        )
    if data["from_run"]:
        run = data["from_run"]
        speed += (
            f", measured by job {run['job_id']}: {run['step_s']:.4g} s per step on "
            f"{run['gpus']} GPUs ({run['timed_by']})"
        )
    return speed


def _print_price(price: dict[str, Any]) -> None:
    """The Price line: the rate per GPU-hour (or node-hour) and the other rates known."""
    unit = "GPU-hour" if price["gpu_hour"] is not None else "node-hour"
    rate = price["gpu_hour"] if price["gpu_hour"] is not None else price["node_hour"]
    others = "".join(
        f", {name.replace('_', '-')} {price[name]:g}"
        for name in ("reserved", "on_demand")
        if price[name] is not None
    )
    click.echo(f"Price: {rate:g} {price['currency']} per {unit}{others}")


def _layout_table(layouts: list[dict[str, Any]], price: dict[str, Any] | None) -> str:
    """The table of the layouts shown, one row each, with a cost column when priced."""
    rows = []
    for n, item in enumerate(layouts, 1):
        mem, step, run_cost = item["memory_bytes"], item["step_s"], item["training"]
        chunks = run_cost["time_limit_chunks"]
        rows.append(
            [
                str(n),
                f"tp={item['tp']} pp={item['pp']} dp={item['dp']} mb={item['micro_batch']}"
                + (" sp" if item["sequence_parallel"] else ""),
                str(item["zero"]),
                item["recompute"],
                _gb(mem["total"]),
                _duration(step["total"]),
                f"{run_cost['days']:.2f}",
                f"{run_cost['gpu_hours']:,.0f}",
                "-" if chunks is None else str(chunks),
                f"{item['mfu'] * 100:.1f}%",
            ]
            + ([] if price is None else [f"{item['cost']['total']:,.0f}"])
        )
    headers = ["#", "LAYOUT", "ZERO", "RECOMPUTE", "GB/GPU", "STEP", "DAYS", "GPU-HOURS"]
    cost_header = [] if price is None else [f"COST {price['currency']}"]
    return table([*headers, "CHUNKS", "MFU", *cost_header], rows)


def _print_spare_nodes(data: dict[str, Any]) -> None:
    """What the spare nodes held beside the run add to layout #1 (nothing without spares)."""
    spares = data["inputs"]["spare_nodes"]
    if spares and data["layouts"]:
        best = data["layouts"][0]["training"]
        click.echo(
            f"Spare nodes: {spares} held beside the run, idle until a node fails: "
            f"+{best['spare_gpu_hours']:,.0f} GPU-hours for #1 "
            f"(+{best['spare_gpu_hours'] / best['gpu_hours'] * 100:.1f}%), for recovery in "
            'seconds without a queue (docs/requeue.md, "Spare nodes")'
        )


def _print_breakdown(n: int, item: dict[str, Any], *, end_to_end: bool) -> None:
    """Layout #n in detail: whether it fits, its memory per GPU and its step time."""
    mem, step = item["memory_bytes"], item["step_s"]
    click.echo()
    verdict = "fits" if item["fits"] else "DOES NOT FIT"
    click.echo(f"#{n}: {verdict}")
    for note in item["notes"]:
        click.echo(f"  ! {note}")
    click.echo(
        f"  memory per GPU: parameters {_gb(mem['parameters'])} + gradients "
        f"{_gb(mem['gradients'])} + optimizer {_gb(mem['optimizer'])} + activations "
        f"{_gb(mem['activations'])} + allowance {_gb(mem['allowance'])} = "
        f"{_gb(mem['total'])} of {_gb(mem['available'])} GB"
    )
    if end_to_end:
        click.echo(
            f"  step: {item['flops_per_iteration']:.4g} FLOPs at the achieved rate = "
            f"{_duration(step['total'])} (bubble and all-reduce inside it); "
            f"{item['training']['iterations']:,} steps"
        )
    else:
        click.echo(
            f"  step: compute {_duration(step['compute'])} + bubble "
            f"{_duration(step['pipeline_bubble'])} ({item['micro_batches_per_pipeline']} "
            f"micro-batches) + DP all-reduce {_duration(step['dp_allreduce'])} = "
            f"{_duration(step['total'])}; {item['training']['iterations']:,} steps"
        )
