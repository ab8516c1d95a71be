"""Checks for extra ``sbatch`` options a job passes through (``--sbatch=--exclusive``).

Only long options sbatch knows are accepted, in ``--name`` or ``--name=value`` form. Options
that hpcjobs sets itself are refused with a pointer to the job field that controls them, so
a pass-through option can never contradict the rendered script.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from hpcjobs.errors import BadInputError
from hpcjobs.safetext import unsafe_reason

_OPTION = re.compile(r"--([a-z][a-z0-9-]*)(?:=(.*))?", re.DOTALL)

#: sbatch options a job may pass through: name -> whether it takes a value
#: (True: required, False: never, None: optional).
PASS_THROUGH: dict[str, bool | None] = {
    "acctg-freq": True,
    "batch": True,
    "bb": True,
    "begin": True,
    "cluster-constraint": True,
    "clusters": True,
    "comment": True,
    "constraint": True,
    "contiguous": False,
    "core-spec": True,
    "cores-per-socket": True,
    "cpu-freq": True,
    "deadline": True,
    "delay-boot": True,
    "exclude": True,
    "exclusive": None,
    "gres": True,
    "gres-flags": True,
    "hint": True,
    "hold": False,
    "kill-on-invalid-dep": True,
    "licenses": True,
    "mail-type": True,
    "mail-user": True,
    "mcs-label": True,
    "mem": True,
    "mem-bind": True,
    "mem-per-cpu": True,
    "mem-per-gpu": True,
    "mincpus": True,
    "network": True,
    "nice": None,
    "no-kill": None,
    "nodelist": True,
    "oversubscribe": False,
    "power": True,
    "priority": True,
    "profile": True,
    "propagate": None,
    "reboot": False,
    "reservation": True,
    "segment": True,
    "sockets-per-node": True,
    "spread-job": False,
    "switches": True,
    "thread-spec": True,
    "threads-per-core": True,
    "tmp": True,
    "use-min-nodes": False,
    "wckey": True,
}

#: Options hpcjobs sets itself, with the job field or flag that controls each one.
MANAGED: dict[str, str] = {
    "job-name": "-J/--job-name",
    "partition": "-p/--partition",
    "nodes": "-N/--nodes",
    "ntasks": "--ntasks-per-node",
    "ntasks-per-node": "--ntasks-per-node",
    "cpus-per-task": "--cpus-per-task",
    "gpus": "--gpus-per-node",
    "gpus-per-node": "--gpus-per-node",
    "gpus-per-task": "--gpus-per-node (hpcjobs gives each rank its GPUs)",
    "time": "-t/--time",
    "account": "-A/--account",
    "qos": "-q/--qos",
    "output": "--output-dir",
    "error": "--output-dir",
    "open-mode": "nothing: hpcjobs always appends, so requeued runs keep their logs",
    "signal": "--signal",
    "requeue": "--no-requeue",
    "no-requeue": "--no-requeue",
    "array": "--array",
    "dependency": "--dependency",
    "chdir": "--chdir",
    "export": "--env (the job must see the batch environment hpcjobs sets up)",
    "wrap": "the command after '--'",
    "parsable": "nothing: hpcjobs adds it when it submits",
    "wait": "nothing: hpcjobs follows the job itself",
}


#: Options that belong to the first submission only. A continuation job must not repeat them
#: (it would be held again, or wait for a begin time), so the script neither lists them as
#: ``#SBATCH`` lines nor passes them on (``HPCJOBS_SBATCH_ARGS``).
FIRST_SUBMISSION_ONLY = frozenset({"hold", "begin"})


def is_first_submission_only(option: str) -> bool:
    """Whether ``option`` (``--name`` or ``--name=value``) is in :data:`FIRST_SUBMISSION_ONLY`."""
    match = _OPTION.fullmatch(option)
    return match is not None and match.group(1) in FIRST_SUBMISSION_ONLY


def check_sbatch_options(options: Sequence[str]) -> list[str]:
    """Check pass-through options and return them unchanged.

    Raises:
        BadInputError: An option is malformed, unknown, set by hpcjobs, or lacks (or has an
            unexpected) value.
    """
    for option in options:
        check_sbatch_option(option)
    return list(options)


def check_sbatch_option(option: str) -> None:
    """Check one pass-through option; see :func:`check_sbatch_options`."""
    reason = unsafe_reason(option)
    if reason is not None:
        raise BadInputError(f"sbatch option {option!r} {reason}")
    match = _OPTION.fullmatch(option)
    if not match:
        raise BadInputError(
            f"sbatch option {option!r} is not of the form --name or --name=value",
            hint="write long options with '=', for example --sbatch=--mem=64G",
        )
    name, value = match.group(1), match.group(2)
    if name in MANAGED:
        raise BadInputError(
            f"sbatch option --{name} is set by hpcjobs",
            hint=f"use {MANAGED[name]} instead",
        )
    if name not in PASS_THROUGH:
        raise BadInputError(
            f"--{name} is not an sbatch option hpcjobs can pass through",
            hint="see 'man sbatch'; known options: "
            + ", ".join(f"--{n}" for n in sorted(PASS_THROUGH)),
        )
    takes = PASS_THROUGH[name]
    if takes is True and not value:
        raise BadInputError(f"sbatch option --{name} needs a value (--{name}=VALUE)")
    if takes is False and value is not None:
        raise BadInputError(f"sbatch option --{name} takes no value")


__all__ = ["MANAGED", "PASS_THROUGH", "check_sbatch_option", "check_sbatch_options"]
