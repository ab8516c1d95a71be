"""A light rank for scale runs: a training program's contracts without its work.

A thousand of these fit on a 2-core host: each is one Python process that imports only
``json``, ``os``, ``signal``, ``sys`` and ``time`` (about 10 MB resident, 20 ms of CPU to
start), sleeps through its steps, and follows what hpcjobs expects of a rank:

- **progress** (:mod:`hpcjobs.runtime.progress`): every rank replaces ``rank-<RANK>`` in
  ``$HPCJOBS_PROGRESS_DIR`` after every step with ``<step> <node>``; rank 0 reports through
  :meth:`~hpcjobs.runtime.checkpoint.CheckpointDir.note_progress`, so it also keeps the
  rank log ``hpcjobs report`` reads for step times;
- **checkpoints** (:mod:`hpcjobs.runtime.checkpoint`): rank 0 saves ``--checkpoint-every``
  steps (and the step it just finished when told to stop), marks the run done at the end, and
  every run starts after the newest complete checkpoint. The other ranks take that step from
  the folder (the newest ``step-N`` holding ``COMPLETE``, saved by an earlier run): they
  import nothing of hpcjobs, as a program in another language would not;
- **stopping**: the warning signal (SIGUSR1 or SIGUSR2) or SIGTERM ends the step; rank 0
  checkpoints it and every rank exits 0;
- **any world size**: a rank needs nothing of the others (no collective), so a run on fewer
  nodes after a fault runs the same way.

Its state is a 64-bit number folded with every step (:func:`advance`), saved in the
checkpoint and written to the done marker: a chain interrupted and resumed any number of
times ends with :func:`expected_state`, as an uninterrupted run does.

Faults on request, each given as ``RUN:RANK:STEPS``: in the chain's run ``RUN``
(``$HPCJOBS_RESTART_COUNT``), rank ``RANK``, after it has run ``STEPS`` steps of that run:

- ``--crash``: the rank writes ``--crash-text`` to stderr (an NCCL error, say) and exits 1;
- ``--hang``: the rank stops reporting and ignores the stop signals, as a rank stuck in a
  collective does.

Run it as a file (``python .../hpcjobs/runtime/lightrank.py --steps 100``), where hpcjobs is
installed: rank 0 imports :mod:`hpcjobs.runtime.checkpoint`; the others do not.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from types import FrameType
from typing import TYPE_CHECKING

from hpcjobs.contract.jobenv import ENV_CHECKPOINT_DIR, ENV_PROGRESS_DIR, ENV_RESTART_COUNT

if TYPE_CHECKING:
    from hpcjobs.runtime.checkpoint import CheckpointDir

MASK = (1 << 64) - 1
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)


def advance(state: int, step: int) -> int:
    """The state after ``step``: a 64-bit LCG mixed with the step number."""
    return (state * 6364136223846793005 + 1442695040888963407 + step * 2654435761) & MASK


def expected_state(steps: int) -> int:
    """The state after steps 0 to ``steps - 1`` run once each."""
    state = 0
    for step in range(steps):
        state = advance(state, step)
    return state


#: The options and what each takes (``--steps`` must be given).
OPTIONS = {
    "steps": "N",  # steps of the whole chain
    "step-time": "SECONDS",  # per step (1)
    "checkpoint-every": "STEPS",  # (10)
    "crash": "RUN:RANK:STEPS",
    "crash-text": "TEXT",  # what the crashing rank writes to stderr
    "hang": "RUN:RANK:STEPS",
}
USAGE = "usage: lightrank.py " + " ".join(f"--{name} {what}" for name, what in OPTIONS.items())


class Args:
    """The parsed command line."""

    def __init__(self, values: dict[str, str]) -> None:
        if "steps" not in values:
            raise ValueError(USAGE)
        self.steps = int(values["steps"])
        self.step_time = float(values.get("step-time", 1.0))
        self.checkpoint_every = max(1, int(values.get("checkpoint-every", 10)))
        self.crash_text = values.get("crash-text", "")
        self.faults: dict[str, tuple[int, int, int]] = {}
        for kind in ("crash", "hang"):
            if values.get(kind):
                run, rank, steps = (int(part) for part in values[kind].split(":"))
                self.faults[kind] = (run, rank, steps)

    def fault(self, run: int, rank: int, steps_run: int) -> str:
        """The fault this rank has now (``crash``, ``hang`` or ``""``)."""
        for kind, where in self.faults.items():
            if where == (run, rank, steps_run):
                return kind
        return ""


def parse_args(argv: list[str]) -> Args:
    """``--name value`` pairs of :data:`OPTIONS` (argparse alone would double a rank's start
    time); raises ValueError with the usage on anything else."""
    if len(argv) % 2:
        raise ValueError(USAGE)
    values = {}
    for flag, text in zip(argv[::2], argv[1::2], strict=True):
        name = flag[2:] if flag.startswith("--") else ""
        if name not in OPTIONS:
            raise ValueError(f"unknown option {flag!r}; {USAGE}")
        values[name] = text
    return Args(values)


def newest_complete(folder: str, run: int) -> int | None:
    """The step of the newest ``step-N`` folder in ``folder`` that holds ``COMPLETE``, saved
    before run ``run`` (a rank that starts late must not take one its own run just saved)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return None
    steps = sorted(
        (int(name[5:]) for name in names if name.startswith("step-") and name[5:].isdigit()),
        reverse=True,
    )
    for step in steps:
        try:
            with open(os.path.join(folder, f"step-{step:09d}", "COMPLETE")) as handle:
                record = json.load(handle)
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and record.get("restart") != str(run):
            return step
    return None


class _Stop:
    """Set by the stop signals."""

    def __init__(self) -> None:
        self.asked = False
        for sig in _STOP_SIGNALS:
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.asked = True


def _report(folder: str, rank: int, text: str) -> None:
    """Replace ``rank-<rank>`` in the progress folder (the contract's atomic replace). A
    report that cannot be made is skipped: the folder is the node agent's, which removes it
    as it ends."""
    tmp = os.path.join(folder, f".rank-{rank}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
        os.replace(tmp, os.path.join(folder, f"rank-{rank}"))
    except OSError:
        pass


def _hang() -> None:
    for sig in _STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    while True:
        time.sleep(3600)


def _start(rank: int, run: int, folder: str) -> tuple[CheckpointDir | None, int, int]:
    """(rank 0's checkpoint folder, the first step, the state before it); the step is -1
    when the chain has finished."""
    if rank != 0:
        if folder and os.path.exists(os.path.join(folder, "DONE")):
            return None, -1, 0
        newest = newest_complete(folder, run) if folder else None
        return None, newest + 1 if newest is not None else 0, 0
    from hpcjobs.runtime.checkpoint import CheckpointDir

    ckpt = CheckpointDir.from_env(keep=3)
    if ckpt.is_done():
        print("[lightrank] already finished", flush=True)
        return ckpt, -1, 0
    last = ckpt.latest()
    start = last.step + 1 if last else 0
    state = int((last.path / "state").read_text()) if last is not None else 0
    world = os.environ.get("SLURM_NTASKS", "?")
    print(f"[lightrank] run {run}: {world} ranks, from step {start}", flush=True)
    return ckpt, start, state


def main(argv: list[str]) -> int:
    try:
        args = parse_args(argv)
    except ValueError as error:  # a malformed number too
        print(f"lightrank: {error}", file=sys.stderr)
        return 2
    stop = _Stop()
    rank = int(os.environ.get("RANK") or os.environ.get("SLURM_PROCID") or 0)
    run = int(os.environ.get(ENV_RESTART_COUNT) or 0)
    progress = os.environ.get(ENV_PROGRESS_DIR, "")
    node = os.environ.get("SLURMD_NODENAME") or os.uname().nodename
    folder = os.environ.get(ENV_CHECKPOINT_DIR, "")
    ckpt, start, state = _start(rank, run, folder)
    if start < 0:
        return 0

    def save(step: int) -> None:
        assert ckpt is not None
        with ckpt.save(step) as tmp:
            (tmp / "state").write_text(str(state))

    step = start - 1
    deadline = time.monotonic()
    for step in range(start, args.steps):
        deadline += args.step_time
        pause = deadline - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        state = advance(state, step)
        if ckpt is not None:
            ckpt.note_progress(step)
            if (step + 1) % args.checkpoint_every == 0 or step + 1 == args.steps:
                save(step)
        elif progress:
            _report(progress, rank, f"{step} {node}\n")
        fault = args.fault(run, rank, step + 1 - start)
        if fault == "crash":
            sys.stderr.write(f"{args.crash_text}\n")
            sys.stderr.flush()
            return 1
        if fault == "hang":
            print(f"[lightrank] rank {rank} hangs after step {step}", flush=True)
            _hang()
        if stop.asked:
            if ckpt is not None and (step + 1) % args.checkpoint_every:
                save(step)
            return 0
    if ckpt is not None and step + 1 >= args.steps:
        ckpt.mark_done({"steps": args.steps, "state": state})
        print(f"[lightrank] done: state {state}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
