"""submitit executors whose jobs run through hpcjobs' own batch scripts.

:class:`HpcExecutor` is a :class:`submitit.SlurmExecutor`: ``submit``, ``map_array``,
``submit_array`` and ``batch`` work as in submitit, and so do the jobs they return. What
differs is the script: every job is rendered by :func:`hpcjobs.script.render.render_job`, exactly as
``hpcjobs submit`` renders it, with the site's partition defaults, NCCL/UCX/Gloo variables,
per-rank CPU/GPU/NIC binding (``srun``, one task per GPU), the warning signal, and the requeue
library (event log, budgets per cause, fast continuation). Each rank runs
``python -m hpcjobs.submitit.task FOLDER`` (:func:`run_task`), which loads the pickled call and
writes its result like submitit does.

**Continuations.** A preempted or timed-out job continues in a new job with a new id. The new
run links ``<folder>/<new id>_submitted.pkl`` to the previous run's pickle before it loads it, and
:class:`HpcJob` follows the chain's event log (``<folder>/chain-<first id>.jsonl``): ``state``,
``done()``, ``result()``, ``stdout()``, ``stderr()`` and ``cancel()`` of the job object returned
at submission always speak for the newest run. Array tasks are followed one by one.

**Resuming.** A :class:`~hpcjobs.runtime.resumable.Resumable` callable gets its stop flag installed
before it runs and resumes from its checkpoint folder (one per job, and per array task). A
callable with submitit's ``checkpoint()`` method (``submitit.helpers.Checkpointable``) is
checkpointed by global rank 0 on the warning signal or SIGTERM, as submitit does; the new state
is pickled for this job's continuation only. Plain functions start over.

Modules: :mod:`~hpcjobs.submitit.executor` (the executor), :mod:`~hpcjobs.submitit.params` (its
parameters), :mod:`~hpcjobs.submitit.hpcjob` (job objects), :mod:`~hpcjobs.submitit.task` (what
each rank runs), :mod:`~hpcjobs.submitit.pickles` (the files between them) and
:mod:`~hpcjobs.submitit.compat` (the only module that imports submitit itself). ``import
hpcjobs`` loads none of them; this package's ``__init__`` imports nothing, so a rank starting
``hpcjobs.submitit.task`` does not load the executor, the site config or the renderer.
"""
