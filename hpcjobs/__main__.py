"""The ``hpcjobs`` command: the console script and ``python -m hpcjobs`` both start here.

Before anything else is imported, the command raises the young-generation threshold of Python's
cyclic garbage collector (:data:`GC_YOUNG_THRESHOLD`). Importing click, Jinja2 and pydantic and
building the config models creates tens of thousands of container objects, almost none of them
garbage: at Python's default of a collection every 700 new objects, a 16-node ``render`` runs
about 85 collections that free nothing, a few percent of its whole time
(``benchmarks/cli_startup.py``). The collector still runs at the higher threshold, so a
command that follows a job for hours frees cycles as before, a little later.

Only the command changes it: ``import hpcjobs`` in a training script, the job's supervisor and
the executor's tasks keep Python's defaults.
"""

import gc

#: Young-generation threshold of the collector in the ``hpcjobs`` command (Python's is 700).
GC_YOUNG_THRESHOLD = 100_000


def main() -> None:
    """Entry point of the ``hpcjobs`` console script and of ``python -m hpcjobs``."""
    young, older, oldest = gc.get_threshold()
    gc.set_threshold(max(young, GC_YOUNG_THRESHOLD), older, oldest)
    from hpcjobs.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
