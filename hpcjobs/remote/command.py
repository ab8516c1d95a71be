"""Turn an argv list into the one command line that the remote login shell runs.

SSH carries a single string, which the remote user's shell parses. Every element is quoted with
:func:`shlex.quote`, so quotes, spaces, ``$(...)``, backticks, ``;`` and newlines arrive as
plain text. Environment values go through ``env NAME=value ...``, quoted the same way (sshd
accepts only a few variables through the protocol itself). The remote login shell must be a
POSIX shell (sh, bash, zsh, dash); csh-family shells do not parse this quoting.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

from hpcjobs.runner import checked_argv
from hpcjobs.safetext import ENV_NAME


def remote_command(argv: Sequence[str], env: Mapping[str, str] | None = None) -> str:
    """The quoted command line for ``argv``, with ``env`` set through ``env NAME=value``.

    Args:
        argv: The program and its arguments.
        env: Variables to set for the program only.

    Raises:
        TypeError: ``argv`` is a string.
        ValueError: ``argv`` is empty, an element or value holds a NUL byte, a variable name
            is not a shell identifier, or ``env`` is used with a program name holding ``=``.
    """
    items = checked_argv(argv)
    if env:
        assignments: list[str] = []
        for name, value in env.items():
            if not ENV_NAME.fullmatch(name):
                raise ValueError(f"invalid environment variable name {name!r}")
            if "\0" in value:
                raise ValueError(f"environment variable {name} contains a NUL byte")
            assignments.append(f"{name}={value}")
        if "=" in items[0]:
            raise ValueError(
                f"program name {items[0]!r} contains '=' and would be taken as a variable"
            )
        items = ["env", *assignments, *items]
    return shlex.join(items)
