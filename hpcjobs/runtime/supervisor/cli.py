"""The supervisor's command line.

``python3 supervisor.pyz --script "$0" --policy JSON -- LAUNCHER...`` supervises one run of a
job (:mod:`.supervise`) and exits with the job's exit code; ``python3 supervisor.pyz agent
--shared DIR --every S ...`` is a node agent (:mod:`.agent`), one per node of the run.
Each program imports only its own half (in :func:`main` and ``_agent``): the renderer imports
this module too, for :data:`ENV_PYTHON`.
"""

from __future__ import annotations

import os
import sys

#: The Python that runs the supervisor and its agents (the site's ``setup.python``).
ENV_PYTHON = "HPCJOBS_PYTHON"


def main(argv: list[str]) -> int:
    if argv[:1] == ["agent"]:
        return _agent(argv[1:])
    import argparse

    from .policy import parse
    from .supervise import Supervisor

    parser = argparse.ArgumentParser(prog="hpcjobs-supervisor", allow_abbrev=False)
    parser.add_argument("--script", required=True, help="the batch script ($0)")
    parser.add_argument("--policy", required=True, help="the job's policy (JSON)")
    parser.add_argument("launch", nargs=argparse.REMAINDER, help="-- the step's launcher")
    args = parser.parse_args(argv)
    launch = args.launch[1:] if args.launch[:1] == ["--"] else args.launch
    if not launch:
        parser.error("no launcher after --")
    try:
        policy = parse(args.policy)
    except ValueError as exc:
        sys.stderr.write(f"hpcjobs: the job's supervisor cannot read its policy: {exc}\n")
        return 2
    return Supervisor(policy, args.script, launch, program=_program()).main()


#: Runs ``$1`` where it is an executable file on the node, else ``$2`` (found on the node's
#: PATH), with the rest of the arguments: the supervisor's own interpreter where the nodes share
#: it, the site's Python where they do not.
_EITHER = 'p=$1; [ -x "$p" ] || p=$2; shift 2; exec "$p" "$@"'


def _program() -> list[str]:
    """How the agents run this program on every node: the site's Python (``HPCJOBS_PYTHON``)
    and this zipapp, or this module where hpcjobs is installed.

    One agent starts on every node of every run, so its start-up counts at 1,000 nodes. Where
    the site's Python is a name found on ``PATH`` (``python3``, the default), each node would
    look it up again, and a version manager's shim found there (pyenv's is a shell script)
    costs more than the agent itself: 0.15 of 0.18 CPU-seconds per agent on the sandbox host.
    The agents run the interpreter this supervisor runs under instead (``sys.executable``,
    what the name led to on the batch host), falling back to the name on a node without that
    file. ``-S``: the zipapp needs the standard library only, not ``site`` and its ``.pth``
    files."""
    python = os.environ.get(ENV_PYTHON) or "python3"
    me = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if not me.endswith(".pyz"):
        return [python, "-m", "hpcjobs.runtime.supervisor"]
    flags = ["-E", "-s", "-S", me]
    own = sys.executable
    if "/" in python or not own or not os.path.isabs(own):
        return [python, *flags]
    return ["/bin/sh", "-c", _EITHER, "hpcjobs-agent", own, python, *flags]


def _agent(argv: list[str]) -> int:
    import argparse

    from .agent import Agent, local_dir, node_name

    parser = argparse.ArgumentParser(prog="hpcjobs-supervisor agent", allow_abbrev=False)
    parser.add_argument("--shared", required=True, help="the chain's progress folder")
    parser.add_argument("--every", type=float, default=5.0, help="seconds between cycles")
    parser.add_argument("--gpu-every", type=int, default=0, help="seconds between GPU samples")
    parser.add_argument("--gpu-query", default="", help="nvidia-smi --query-gpu fields")
    parser.add_argument("--gpu-dir", default="", help="where <node>.csv goes")
    parser.add_argument("--since", type=float, default=None, help="older reports do not count")
    parser.add_argument("--deputy", default="", help="the node whose agent watches the batch host")
    parser.add_argument("--batch-host", default="", help="the job's batch host")
    parser.add_argument("--chain-log", default="", help="the chain's event log (the deputy's)")
    parser.add_argument("--warn", default="", help="the signals a warning may go out on (A,B)")
    args = parser.parse_args(argv)
    deputy = bool(args.deputy) and args.deputy == node_name()
    agent = Agent(
        local_dir(),
        args.shared,
        args.every,
        args.gpu_every,
        args.gpu_query,
        args.gpu_dir,
        since=args.since,
        watch=args.batch_host if deputy else "",
        chain_log=args.chain_log,
        warn=[name for name in args.warn.split(",") if name],
    )
    return agent.run()
