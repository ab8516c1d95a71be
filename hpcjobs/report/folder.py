"""Read the small files a job leaves in one folder (progress reports, GPU samples) through a runner.

On this machine the files are read directly; through any other runner (SSH) one ``find ...
-exec grep -H '' {} +`` returns all of them in a single command, however many ranks or nodes
wrote one.
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path

from hpcjobs.errors import HpcJobsError
from hpcjobs.runner import LocalRunner, Runner
from hpcjobs.textlines import split_lines


def read_files(runner: Runner, folder: str, pattern: str) -> dict[str, str] | None:
    """The text of every file in ``folder`` (not below it) whose name matches the glob
    ``pattern``, by file name; ``None`` when the folder cannot be read. Bytes that are not
    UTF-8 are replaced, and a file that vanishes while it is read is left out."""
    if isinstance(runner, LocalRunner):
        return _local(folder, pattern)
    argv = ["find", folder, "-maxdepth", "1", "-name", pattern]
    argv += ["-exec", "grep", "-H", "", "{}", "+"]
    try:
        result = runner.run(argv, check=False, timeout=60)
    except HpcJobsError:
        return None
    # find prints each path as the folder it was given, a slash, the name: strip that prefix
    # rather than split at the first colon, which a folder's own name may contain.
    prefix = folder if folder.endswith("/") else folder + "/"
    lines: dict[str, list[str]] = {}
    for line in split_lines(result.stdout):
        if not line.startswith(prefix):
            continue
        name, sep, text = line[len(prefix) :].partition(":")
        if sep and "/" not in name and fnmatch.fnmatchcase(name, pattern):
            lines.setdefault(name, []).append(text)
    return {name: "\n".join(items) + "\n" for name, items in lines.items()}


def _local(folder: str, pattern: str) -> dict[str, str] | None:
    try:
        names = os.listdir(folder)
    except OSError:
        return None
    texts: dict[str, str] = {}
    for name in names:
        if fnmatch.fnmatchcase(name, pattern):
            try:
                texts[name] = (Path(folder) / name).read_bytes().decode("utf-8", errors="replace")
            except OSError:
                continue
    return texts
