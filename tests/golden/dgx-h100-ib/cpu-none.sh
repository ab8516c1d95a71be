#!/bin/bash
# shellcheck disable=SC2317,SC2329,SC1091  # functions run in the ranks (through bash -c); site files are sourced
#SBATCH --job-name=preprocess
#SBATCH --partition=batch
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=224
#SBATCH --time=00:20:00
#SBATCH --output=/home/user/hpcjobs/runs/preprocess/slurm-%j.out
#SBATCH --open-mode=append
#SBATCH --signal=B:USR2@300
#SBATCH --no-requeue
#
# Job script rendered by hpcjobs for site dgx-h100-ib, partition batch.
# hpcjobs submits it with these options (they override the #SBATCH lines above):
#   sbatch --job-name=preprocess --partition=batch --nodes=1 --ntasks-per-node=1 --cpus-per-task=224 --time=00:20:00 --output=/home/user/hpcjobs/runs/preprocess/slurm-%j.out --open-mode=append --signal=B:USR2@300 --no-requeue SCRIPT

# --- environment: modules, site setup, job variables ---
set -eo pipefail
module load cuda/12.4
module load nccl/2.21
source /etc/profile.d/dgx-site.sh
export HPCJOBS_JOB_OUTPUT_DIR=/home/user/hpcjobs/runs/preprocess
export HPCJOBS_CHECKPOINT_DIR=/home/user/hpcjobs/runs/preprocess/checkpoints
export HPCJOBS_SIGNAL=USR2
export HPCJOBS_GPU_MONITOR_INTERVAL=0
export HPCJOBS_GPU_QUERY=timestamp,index,uuid,utilization.gpu,memory.used,memory.total
export HPCJOBS_RUN_FINGERPRINT=a69bfeca0378801cee5d
export HPCJOBS_RUN_FILE=/home/user/hpcjobs/runs/preprocess/checkpoints/RUN
export HPCJOBS_PYTHON=python3
export PYTHONUNBUFFERED=1  # hpcjobs: logs reach the output file as they are written

# --- NCCL / UCX / Gloo tuning (origin after each value) ---
export NCCL_IB_HCA='=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_7:1'  # topology dgx-h100
export UCX_NET_DEVICES=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_7:1  # topology dgx-h100
export NCCL_NET_GDR_LEVEL=PHB  # topology dgx-h100
export NCCL_SOCKET_IFNAME=bond0  # topology dgx-h100
export GLOO_SOCKET_IFNAME=bond0  # topology dgx-h100
export NCCL_IB_TIMEOUT=23  # partition batch
export NCCL_IB_RETRY_CNT=7  # profile production
export NCCL_IB_QPS_PER_CONNECTION=4  # profile production
export NCCL_IB_SPLIT_DATA_ON_QPS=0  # profile production
export NCCL_IB_ADAPTIVE_ROUTING=1  # profile production
export NCCL_CROSS_NIC=0  # profile production
export NCCL_NVLS_ENABLE=1  # profile production
export NCCL_DEBUG=WARN  # profile production
export TORCH_NCCL_ASYNC_ERROR_HANDLING=1  # profile production
export UCX_TLS=rc,cuda_copy  # profile production

# --- binding: none (the command runs once, in the batch step) ---

# --- launch: none, under the job's supervisor ---
set +e  # from here on a failed command is handled where it happens (head closes pipes early)
# Rendezvous on the first node's address (NodeAddr, which resolves even where node names do
# not), on a port derived from the job id so that jobs sharing a node do not collide. Exported
# for every launcher: hpcjobs.runtime.distributed reads them and asks Slurm nothing.
hpcjobs_head=$(scontrol show hostnames "${SLURM_JOB_NODELIST:-localhost}" | head -n 1)
MASTER_ADDR=$(scontrol show node "$hpcjobs_head" 2>/dev/null | tr ' ' '\n' | sed -n 's/^NodeAddr=//p' | head -n 1)
export MASTER_ADDR="${MASTER_ADDR:-$hpcjobs_head}"
export MASTER_PORT=$(( 20000 + SLURM_JOB_ID % 10000 ))
hpcjobs_start() {
  # Become "$@", marked as this job's program: the warning goes to its processes that listen
  # for it, each on the signal it catches, never to the whole step (docs/requeue.md, "Signals").
  export HPCJOBS_PROGRAM_OF="${HPCJOBS_PROGRAM_TOKEN:-}"
  exec -- "$@"
}
hpcjobs_rank_setup() {
  # Runs in each rank (hpcjobs_rank): its progress folder on node-local storage, read by the
  # node agent, with an empty program-<pid> file there (the process this rank becomes: the
  # agent delivers the warning from it down, without looking at every process of the node);
  # and a copy of its output in capture-<root>/<node>.rank-<RANK>, for telling a crash of the
  # node from one of the program (hpcjobs_tee).
  local node="${SLURMD_NODENAME:-$(hostname -s)}" file
  if [ -n "${HPCJOBS_NODE_TMP:-}" ]; then
    export HPCJOBS_PROGRESS_DIR="$HPCJOBS_NODE_TMP/$node"
    (umask 077 && mkdir -p -- "$HPCJOBS_PROGRESS_DIR" && : >"$HPCJOBS_PROGRESS_DIR/program-$$") 2>/dev/null
  fi
  file="${HPCJOBS_CAPTURE_DIR:-}/$node.rank-${RANK:-${SLURM_PROCID:-0}}"
  if [ -z "${HPCJOBS_CAPTURE_DIR:-}" ] || ! (umask 077 && : >>"$file") 2>/dev/null; then return 0; fi
  exec 2> >(hpcjobs_tee "$file" >&2) > >(hpcjobs_tee "$file")
}
hpcjobs_tee() {
  # Copies a rank's output to "$1" until the rank and its children close it. It ignores the
  # signals Slurm sends the step, and runs in a session of its own: where Slurm tracks a
  # step by its process group (proctrack/pgid), the step's end waits for every process of
  # the group, a tee orphaned by the rank's end included, until init has reaped it
  # (1 to 3 s per step; docs/scale.md).
  trap '' TERM INT HUP QUIT USR1 USR2
  if command -v setsid >/dev/null 2>&1; then exec setsid tee -a -- "$1"; fi
  exec tee -a -- "$1"
}
export -f hpcjobs_start hpcjobs_rank_setup hpcjobs_tee
# The supervisor (docs/requeue.md, "The supervisor") starts the step below, delivers
# SIGUSR2 to the processes that listen for it, forwards SIGTERM, watches for
# stalls, and decides how the job goes on: finished,
# failed, or continued from its last checkpoint after a preemption, the time limit or a fault.
# It is Python (standard library only) that 'hpcjobs submit' (and 'render') writes next to the job's output.
hpcjobs_policy='{"budgets":{"application":0,"infrastructure":3,"node_failure":5,"preemption":20,"stall":3,"timeout":10},"format":1,"forward":["USR2","TERM"],"health_check":"","health_timeout":60,"job_expansion":null,"keep_out_faults":2,"keep_out_hours":24,"lead":300,"max_excluded":8,"max_total":null,"min_nodes":0,"node_multiple":1,"nodes":1,"patterns":[],"sbatch_args":["--job-name=preprocess","--partition=batch","--nodes=1","--ntasks-per-node=1","--cpus-per-task=224","--time=00:20:00","--output=/home/user/hpcjobs/runs/preprocess/slurm-%j.out","--open-mode=append","--signal=B:USR2@300","--no-requeue"],"signal":"USR2","spare_nodes":0,"stall_grace":10,"stall_timeout":1800,"standby":false,"storm_runs":3,"straggler_ratio":0.8,"straggler_window":60,"suspects_file":""}'
hpcjobs_supervisor=/home/user/hpcjobs/runs/preprocess/.hpcjobs/supervisor-HASH.pyz
if [ ! -r "$hpcjobs_supervisor" ] || ! "$HPCJOBS_PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 8))'; then
  echo "hpcjobs: cannot start the job's supervisor $hpcjobs_supervisor ('hpcjobs submit' and 'hpcjobs render' write it) with $HPCJOBS_PYTHON (the site's setup.python, Python 3.8 or newer)" >&2
  exit 2
fi
# shellcheck disable=SC2016
exec "$HPCJOBS_PYTHON" -E -s "$hpcjobs_supervisor" --script "$0" --policy "$hpcjobs_policy" -- \
  bash -c 'hpcjobs_start "$@"' hpcjobs-task bash scripts/preprocess.sh --out /scratch/shards
# --- dry run: nothing was submitted; hpcjobs would run (SUBMITDIR: <output dir>/submit-<time>-<token>) ---
# sbatch --parsable --job-name=preprocess --partition=batch --nodes=1 --ntasks-per-node=1 --cpus-per-task=224 --time=00:20:00 --output=/home/user/hpcjobs/runs/preprocess/slurm-%j.out --open-mode=append --signal=B:USR2@300 --no-requeue '--comment=hpcjobs:<token>' SUBMITDIR/job.sh
