"""Planning a training run before it starts: parallel layout, memory, step time and cost.

* :mod:`hpcjobs.plan.model`: the model's shape, its parameter count and FLOPs per iteration
  (Narayanan et al. 2021);
* :mod:`hpcjobs.plan.memory`: per-GPU memory of one layout: model states with ZeRO
  partitioning (Rajbhandari et al. 2020) and activations (Korthikanti et al. 2022);
* :mod:`hpcjobs.plan.timing`: step time (compute, pipeline bubble, data-parallel all-reduce)
  and the whole run (days, GPU-hours, time-limit chunks);
* :mod:`hpcjobs.plan.search`: the layouts that fit, best first;
* :mod:`hpcjobs.plan.fromrun`: achieved FLOP/s measured by an earlier run;
* :mod:`hpcjobs.plan.jobfile`: a job file for the chosen layout.

docs/plan.md gives the formulas, their sources and a worked example. Only the standard
library is imported here, but for :mod:`~hpcjobs.plan.jobfile` (a job file: pydantic, yaml) and
the bounded file reader, imported where a model config is read.
"""
