"""Job array specs (``0-999%50``, ``1,3,8-20:4``) and splitting them to fit ``MaxArraySize``.

Slurm refuses array indices at or above the cluster's ``MaxArraySize``. A larger sweep is
split into chunks, one array job per chunk. Each chunk is rebased to start at index 0 and
carries an offset: the global task number is ``SLURM_ARRAY_TASK_ID + HPCJOBS_ARRAY_OFFSET``
(see :mod:`hpcjobs.jobs.submission`). A ``%N`` throttle is shared out between the chunks so that
no more than N tasks run at once overall.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hpcjobs.errors import BadInputError
from hpcjobs.safetext import parse_int

#: Far above any real MaxArraySize (Slurm caps it at 4,000,001); guards against typos.
MAX_INDEX = 4_000_000

_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+)(?::([0-9]+))?)?")


@dataclass(frozen=True)
class ArraySpec:
    """A parsed ``--array`` value: the task indices and the optional ``%N`` throttle."""

    indices: tuple[int, ...]
    throttle: int | None = None

    @property
    def max_index(self) -> int:
        return self.indices[-1]

    def render(self) -> str:
        """The spec in Slurm's syntax, ranges and strides compressed."""
        text = compress(self.indices)
        return f"{text}%{self.throttle}" if self.throttle else text


@dataclass(frozen=True)
class ArrayChunk:
    """One sbatch call's share of a split array."""

    offset: int
    spec: ArraySpec  # rebased: indices start near 0

    @property
    def global_indices(self) -> tuple[int, ...]:
        return tuple(i + self.offset for i in self.spec.indices)


def parse_array(text: str) -> ArraySpec:
    """Parse an ``--array`` value.

    Raises:
        BadInputError: the spec is malformed, empty or out of range.
    """
    raw = text.strip()
    body, sep, throttle_text = raw.partition("%")
    throttle: int | None = None
    if sep:
        try:
            throttle = parse_int(throttle_text, minimum=1)
        except ValueError:
            raise BadInputError(
                f"bad array throttle in {raw!r}: expected '%N' with N >= 1"
            ) from None
    indices: set[int] = set()
    for part in body.split(","):
        match = _RANGE.fullmatch(part.strip())
        if not match:
            raise BadInputError(
                f"bad array spec {raw!r}",
                hint="use indices and ranges like '0-999', '1,3,5-9', '0-100:10', with '%N' "
                "to run at most N at once",
            )
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) else first
        step = int(match.group(3)) if match.group(3) else 1
        if last < first or step < 1:
            raise BadInputError(f"bad array range {part!r} in {raw!r}")
        if last > MAX_INDEX:
            raise BadInputError(f"array index {last} in {raw!r} is out of range")
        indices.update(range(first, last + 1, step))
    return ArraySpec(tuple(sorted(indices)), throttle)


def split_array(spec: ArraySpec, max_array_size: int) -> list[ArrayChunk]:
    """Split ``spec`` so that every chunk's indices are below ``max_array_size``.

    A spec that already fits comes back as one chunk with offset 0, unchanged. Otherwise each
    chunk starts at its first index (rebased to 0) and takes every index that fits.
    """
    if max_array_size < 1:
        raise ValueError("max_array_size must be >= 1")
    if spec.max_index < max_array_size:
        return [ArrayChunk(0, spec)]
    groups: list[tuple[int, list[int]]] = []
    for index in spec.indices:
        if groups and index - groups[-1][0] < max_array_size:
            groups[-1][1].append(index - groups[-1][0])
        else:
            groups.append((index, [0]))
    shares = _share(spec.throttle, len(groups))
    return [
        ArrayChunk(offset, ArraySpec(tuple(local), share))
        for (offset, local), share in zip(groups, shares, strict=True)
    ]


def compress(indices: tuple[int, ...] | list[int]) -> str:
    """Slurm syntax for sorted indices: runs become ``a-b``, strides ``a-b:s``."""
    parts: list[str] = []
    i = 0
    n = len(indices)
    while i < n:
        j = i
        if i + 1 < n:
            step = indices[i + 1] - indices[i]
            while j + 1 < n and indices[j + 1] - indices[j] == step:
                j += 1
        count = j - i + 1
        if count >= 3 or (count == 2 and indices[j] - indices[i] == 1):
            step = indices[i + 1] - indices[i]
            suffix = f":{step}" if step > 1 else ""
            parts.append(f"{indices[i]}-{indices[j]}{suffix}")
            i = j + 1
        else:
            parts.append(str(indices[i]))
            i += 1
    return ",".join(parts)


def _share(throttle: int | None, parts: int) -> list[int | None]:
    """Split a ``%N`` limit between ``parts`` chunks (each gets at least 1)."""
    if throttle is None:
        return [None] * parts
    base, extra = divmod(throttle, parts)
    return [max(1, base + (1 if i < extra else 0)) for i in range(parts)]
