"""Names the batch script and the code in the job share, defined once and importing nothing.

The renderer (:mod:`hpcjobs.script.render`) writes them into every script and the submit side
(:mod:`hpcjobs.jobs.checkpointclaim`) writes the files they name; the checkpoint folder
(:mod:`hpcjobs.runtime.checkpoint`) and the distributed set-up
(:mod:`hpcjobs.runtime.distributed`) read them in the job. They live in a module of their own
so that rendering a script does not load the code that runs inside the job.
"""

from __future__ import annotations

#: The marker a checkpoint folder holds once its training finished: later runs exit at once.
DONE = "DONE"
#: The file in a checkpoint folder that names the training owning it
#: (see :mod:`hpcjobs.jobs.checkpointclaim`).
RUN_FILE = "RUN"
#: What the batch script exports to every run and rank: the checkpoint folder, the warning
#: signal's name (without ``SIG``), and the chain's first job id (set by the supervisor too).
ENV_CHECKPOINT_DIR = "HPCJOBS_CHECKPOINT_DIR"
ENV_SIGNAL = "HPCJOBS_SIGNAL"
ENV_CHAIN_ROOT = "HPCJOBS_CHAIN_ROOT"
#: What the supervisor sets for each run: how many runs of the chain came before, the node-local
#: folder the ranks report their progress in, and the folder for copies of the ranks' output.
ENV_RESTART_COUNT = "HPCJOBS_RESTART_COUNT"
ENV_PROGRESS_DIR = "HPCJOBS_PROGRESS_DIR"
ENV_CAPTURE_DIR = "HPCJOBS_CAPTURE_DIR"
#: What the batch script exports: this job's run fingerprint, and the RUN file it must match.
ENV_FINGERPRINT = "HPCJOBS_RUN_FINGERPRINT"
ENV_RUN_FILE = "HPCJOBS_RUN_FILE"
#: Seconds between GPU telemetry samples in the job; 0 turns the sampler off (hpcjobs.report.gpu).
ENV_GPU_INTERVAL = "HPCJOBS_GPU_MONITOR_INTERVAL"
#: The ``nvidia-smi --query-gpu`` fields the job's sampler asks for, in this order.
ENV_GPU_QUERY = "HPCJOBS_GPU_QUERY"
GPU_QUERY = "timestamp,index,uuid,utilization.gpu,memory.used,memory.total"
#: MASTER_PORT = PORT_BASE + job_id % PORT_SPAN: inside the unprivileged range, below the
#: usual ephemeral range (32768+), away from torchrun's default 29500.
PORT_BASE = 20000
PORT_SPAN = 10000
