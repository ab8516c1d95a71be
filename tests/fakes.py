"""The test doubles every unit test shares: a runner that answers from canned replies, a
runner that answers Slurm commands from output recorded from a real Slurm, and the helpers
that build clients over them. Fakes stand in for Slurm only where a test checks pure logic;
each capability also has a live test against the sandbox (tests/live)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from hpcjobs.runner import Result
from hpcjobs.slurm.client import SlurmClient
from hpcjobs.slurm.retry import SLURM_RETRY

#: Output recorded from real Slurm releases (see tests/data/README if present).
DATA = Path(__file__).resolve().parent / "data"

Reply = Result | BaseException | Callable[[Sequence[str]], Result]


@dataclass
class FakeRunner:
    """Answers each command from a queue of replies per program; records every call."""

    replies: dict[str, list[Reply]] = field(default_factory=dict)
    calls: list[list[str]] = field(default_factory=list)
    envs: list[Mapping[str, str] | None] = field(default_factory=list)

    def add(self, program: str, *replies: Reply) -> FakeRunner:
        self.replies.setdefault(program, []).extend(replies)
        return self

    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: str | None = None,
        timeout: float | None = None,
        check: bool = True,
        env: Mapping[str, str] | None = None,
    ) -> Result:
        self.calls.append(list(argv))
        self.envs.append(env)
        queue = self.replies.get(argv[0], [])
        if not queue:
            raise AssertionError(f"unexpected command: {argv}")
        reply = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(reply, BaseException):
            raise reply
        if callable(reply):
            return reply(argv)
        return Result(tuple(argv), reply.returncode, reply.stdout, reply.stderr)

    def count(self, program: str) -> int:
        return sum(1 for c in self.calls if c[0] == program)


def ok(stdout: str = "") -> Result:
    return Result(("x",), 0, stdout, "")


def fail(stderr: str, code: int = 1) -> Result:
    return Result(("x",), code, "", stderr)


@dataclass
class Sleeps:
    waits: list[float] = field(default_factory=list)

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def client_for(
    runner: FakeRunner, sleeps: Sleeps | None = None, total: float = 180.0
) -> SlurmClient:
    policy = replace(SLURM_RETRY, total_s=total, sleep=sleeps or Sleeps())
    return SlurmClient(runner, policy=policy)


class RecordedRunner:
    """Answers ``sinfo``, ``scontrol show`` and the node probe from output recorded from one
    Slurm release (``tests/data/slurm/<version>/cluster``)."""

    def __init__(self, version: str, probe: str | None = None) -> None:
        self.folder = DATA / "slurm" / version / "cluster"
        self.probe = probe
        self.calls: list[tuple[str, ...]] = []

    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: str | None = None,
        timeout: float | None = None,
        check: bool = True,
        env: Mapping[str, str] | None = None,
    ) -> Result:
        self.calls.append(tuple(argv))
        name = {
            ("sinfo",): "sinfo.txt",
            ("scontrol", "node"): "scontrol-show-node.txt",
            ("scontrol", "partition"): "scontrol-show-partition.txt",
            ("scontrol", "config"): "scontrol-show-config.txt",
        }
        key = (argv[0],) if argv[0] in ("sinfo", "srun") else (argv[0], argv[-1])
        if argv[0] == "srun":
            assert self.probe is not None
            return Result(tuple(argv), 0, (DATA / "configs" / "probe" / self.probe).read_text(), "")
        return Result(tuple(argv), 0, (self.folder / name[key]).read_text(), "")
