"""GPU telemetry: the samples a job's GPU sampler writes, and what they say per GPU.

The batch script starts, on each node of the job where ``nvidia-smi`` exists (and unless the
job was submitted with ``--no-gpu-monitor``), one sampler (on a multi-node job, in a job step of
its own that overlaps the job's others, ``srun --overlap``, one task per node)::

    nvidia-smi --query-gpu=<GPU_QUERY> --format=csv,noheader,nounits -l <interval>

appending to ``<output dir>/gpu-<chain root>/<node>.csv`` (the Slurm node name; mode 0600,
folder 0700), next to the chain's event log. Without ``nvidia-smi`` nothing is written and the
report says "no telemetry"; numbers are never made up.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from hpcjobs.contract import names
from hpcjobs.report.folder import read_files
from hpcjobs.runner import Runner
from hpcjobs.textlines import split_lines

#: A GPU whose mean utilisation stays below this (percent) sat idle.
IDLE_UTIL = 5.0
# The fields and their order: hpcjobs.contract.jobenv.GPU_QUERY, which the renderer hands
# to the batch script's sampler.


def gpu_dir(output_dir: str, root: str) -> str:
    """A chain's telemetry folder, next to its event log."""
    return f"{output_dir.rstrip('/')}/{names.gpu_dir(root)}"


@dataclass(frozen=True)
class Sample:
    """One line of ``nvidia-smi --query-gpu=GPU_QUERY --format=csv,noheader,nounits``."""

    time: float
    index: int
    uuid: str
    util: float | None
    mem_used_mib: float | None
    mem_total_mib: float | None


def parse_samples(text: str) -> list[Sample]:
    """Samples from the sampler's output; malformed lines (and ``[N/A]`` values) skipped."""
    out = []
    for line in split_lines(text):
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 6:
            continue
        when = _time(parts[0])
        if when is None or not parts[1].isdigit():
            continue
        out.append(
            Sample(when, int(parts[1]), parts[2], _num(parts[3]), _num(parts[4]), _num(parts[5]))
        )
    return out


@dataclass
class GpuStats:
    """One GPU over the chain's samples."""

    host: str
    index: int
    uuid: str
    samples: int
    mean_util: float | None
    max_mem_used_mib: float | None
    mem_total_mib: float | None

    @property
    def idle(self) -> bool:
        return self.mean_util is not None and self.mean_util < IDLE_UTIL

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "index": self.index,
            "uuid": self.uuid,
            "samples": self.samples,
            "mean_util_pct": self.mean_util,
            "max_mem_used_mib": self.max_mem_used_mib,
            "mem_total_mib": self.mem_total_mib,
            "idle": self.idle,
        }


@dataclass
class GpuSummary:
    """Every GPU the chain's sampler saw."""

    gpus: list[GpuStats] = field(default_factory=list)

    @property
    def idle(self) -> list[GpuStats]:
        return [g for g in self.gpus if g.idle]

    def to_dict(self) -> dict[str, Any]:
        return {"gpus": [g.to_dict() for g in self.gpus], "idle": len(self.idle)}


def summarize(samples_by_host: dict[str, list[Sample]]) -> GpuSummary | None:
    """Per-GPU figures; None when there is not a single sample."""
    stats = []
    for host in sorted(samples_by_host):
        by_gpu: dict[tuple[int, str], list[Sample]] = {}
        for sample in samples_by_host[host]:
            by_gpu.setdefault((sample.index, sample.uuid), []).append(sample)
        for (index, uuid), items in sorted(by_gpu.items()):
            utils = [s.util for s in items if s.util is not None]
            used = [s.mem_used_mib for s in items if s.mem_used_mib is not None]
            totals = [s.mem_total_mib for s in items if s.mem_total_mib is not None]
            stats.append(
                GpuStats(
                    host=host,
                    index=index,
                    uuid=uuid,
                    samples=len(items),
                    mean_util=sum(utils) / len(utils) if utils else None,
                    max_mem_used_mib=max(used) if used else None,
                    mem_total_mib=max(totals) if totals else None,
                )
            )
    return GpuSummary(stats) if stats else None


def read_gpu_samples(runner: Runner, output_dir: str, root: str) -> GpuSummary | None:
    """The chain's telemetry, read through ``runner``; None when there is none."""
    folder = gpu_dir(output_dir, root)
    texts = read_files(runner, folder, "*.csv")
    if texts is None:
        return None
    return summarize({name[:-4]: parse_samples(text) for name, text in texts.items()})


def _time(text: str) -> float | None:
    for fmt in ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S"):
        try:
            return datetime.strptime(text, fmt).timestamp()
        except ValueError:
            continue
    return None


def _num(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None
