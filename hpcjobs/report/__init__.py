"""``hpcjobs report``: where a chain's allocated GPU-hours went (goodput, badput, timelines).

- each run's allocation comes from ``SlurmClient.usage`` (:mod:`hpcjobs.slurm.usage`:
  AllocTRES x elapsed, CPU efficiency, peak memory), one ``sacct`` for any number of jobs or a
  time window;
- :mod:`~hpcjobs.report.progressfiles`: the per-rank progress reports of a chain
  (:mod:`hpcjobs.runtime.progress`);
- :mod:`~hpcjobs.report.gpu`: GPU telemetry samples (``nvidia-smi --query-gpu``);
- :mod:`~hpcjobs.report.goodput`: the breakdown of allocated time into goodput and badput;
- :mod:`~hpcjobs.report.build`: putting a chain's report together;
- :mod:`~hpcjobs.report.html`: the self-contained page; :mod:`~hpcjobs.report.compare`: A vs B.

Definitions: docs/report.md.
"""
