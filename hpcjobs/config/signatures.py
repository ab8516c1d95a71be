"""Checking the infrastructure signatures a site adds (``faults.signatures``): each must be a
POSIX extended regular expression, as ``grep -E`` reads it. hpcjobs' own signatures, and the
order they are searched in, are defined with the job's supervisor
(:mod:`hpcjobs.runtime.supervisor.signatures`)."""

from __future__ import annotations

import re

from hpcjobs.runtime.supervisor.signatures import DEFAULT_SIGNATURES, Signature, all_patterns

# Perl and Python extensions that grep -E does not know (a string: compiled on first use).
_NOT_ERE = r"\\[dDwWsSbBAZz]|\(\?|[*+?}]\?"


def check_ere(pattern: str) -> str:
    """``pattern`` when it compiles and uses no syntax outside POSIX extended regular expressions.

    Raises:
        ValueError: it does not compile, or uses ``\\d``, ``\\w``, ``(?...)`` or lazy repeats.
    """
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"{pattern!r} is not a valid regular expression: {exc}") from None
    if re.search(_NOT_ERE, pattern):
        raise ValueError(
            f"{pattern!r} uses syntax grep -E does not know (\\d, \\w, \\s, (?...), lazy repeats): "
            "write [0-9], [A-Za-z0-9_], [[:space:]] instead"
        )
    return pattern


__all__ = ["DEFAULT_SIGNATURES", "Signature", "all_patterns", "check_ere"]
