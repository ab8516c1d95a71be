"""Split text into lines at ``\\n`` only: the one line splitter for command output and files.

:meth:`str.splitlines` also breaks at ``\\r``, ``\\v``, ``\\f``, ``\\x1c``-``\\x1e``, ``\\x85``,
U+2028 and U+2029. Any of those can sit inside a value hpcjobs does not control (a job name, a
comment, an event's detail), and would then forge a line of its own: a fake ``squeue`` row, a
fake event in a chain log. Slurm and the batch script end every record with ``\\n`` and nothing
else, so that is the only place a line ends.
"""

from __future__ import annotations


def split_lines(text: str) -> list[str]:
    """The lines of ``text``, split at ``\\n`` only, without the empty piece after a final one.

    ``"a\\nb\\n"`` and ``"a\\nb"`` both give ``["a", "b"]``; ``""`` gives ``[]``. Other line
    break characters (``\\r``, U+2028, ...) stay inside their line.
    """
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines
