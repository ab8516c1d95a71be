"""The ``hpcjobs`` command: the console script and ``python -m hpcjobs`` both start here.

Before it imports the command line, the command raises the young-generation threshold of
Python's cyclic garbage collector (:data:`GC_YOUNG_THRESHOLD`). Importing click, Jinja2 and
pydantic and building the config models creates tens of thousands of container objects, almost
none of them garbage: at Python's default of a collection every 700 new objects (2,000 from
Python 3.13), a 16-node ``render`` on Python 3.11 runs about 85 collections that free nothing,
some 5 % of its time (``benchmarks/collector_startup.py``). The collector still runs at the
higher threshold, so a command that follows a job for hours frees cycles as before, later.

As it ends, the command freezes the objects it has (``gc.freeze``), so that the interpreter's
last collection at exit does not go over them all again.

Only the command changes it: ``import hpcjobs`` in a training script, the job's supervisor and
the executor's tasks keep Python's defaults.
"""

import gc

#: Young-generation threshold of the collector in the ``hpcjobs`` command (Python's: 700, 2,000
#: from 3.13). A higher default of Python's is kept.
GC_YOUNG_THRESHOLD = 100_000


def main() -> None:
    """Entry point of the ``hpcjobs`` console script and of ``python -m hpcjobs``."""
    young, older, oldest = gc.get_threshold()
    gc.set_threshold(max(young, GC_YOUNG_THRESHOLD), older, oldest)
    from hpcjobs.cli import main as cli_main

    try:
        cli_main()
    finally:
        # Python ends by collecting once more over every object still tracked: some 60,000
        # after a render, most of its shutdown time. Frozen objects are left out of it; they
        # are still freed by reference counting as the interpreter clears its modules, and
        # Python never promised finalizers for objects in cycles still alive at exit.
        gc.freeze()


if __name__ == "__main__":
    main()
