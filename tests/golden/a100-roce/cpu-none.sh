#!/bin/bash
# shellcheck disable=SC2317,SC2329,SC1091  # functions run in the ranks (through bash -c); site files are sourced
#SBATCH --job-name=preprocess
#SBATCH --partition=finetune
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=128
#SBATCH --time=00:20:00
#SBATCH --output=/home/user/hpcjobs/runs/preprocess/slurm-%j.out
#SBATCH --open-mode=append
#SBATCH --signal=B:USR2@180
#SBATCH --no-requeue
#
# Job script rendered by hpcjobs for site a100-roce, partition finetune.
# hpcjobs submits it with these options (they override the #SBATCH lines above):
#   sbatch --job-name=preprocess --partition=finetune --nodes=1 --ntasks-per-node=1 --cpus-per-task=128 --time=00:20:00 --output=/home/user/hpcjobs/runs/preprocess/slurm-%j.out --open-mode=append --signal=B:USR2@180 --no-requeue SCRIPT

# --- environment: modules, site setup, job variables ---
set -eo pipefail
module load cuda/12.2
export HPCJOBS_RUN_DIR=/home/user/hpcjobs/runs/preprocess
export HPCJOBS_CHECKPOINT_DIR=/home/user/hpcjobs/runs/preprocess/checkpoints
export HPCJOBS_SIGNAL=USR2
export HPCJOBS_RESTART_COUNT="${SLURM_RESTART_COUNT:-0}"
export PYTHONUNBUFFERED=1  # hpcjobs: logs reach the output file as they are written
(umask 077 && mkdir -p "$HPCJOBS_CHECKPOINT_DIR")

# --- NCCL / UCX / Gloo tuning (origin after each value) ---
export NCCL_IB_HCA='=mlx5_0:1,mlx5_1:1'  # topology a100-roce
export UCX_NET_DEVICES=mlx5_0:1,mlx5_1:1  # topology a100-roce
export NCCL_IB_GID_INDEX=3  # profile roce
export NCCL_NET_GDR_LEVEL=PHB  # topology a100-roce
export NCCL_SOCKET_IFNAME=ens1f0np0  # topology a100-roce
export GLOO_SOCKET_IFNAME=ens1f0np0  # topology a100-roce
export NCCL_IB_TC=106  # profile roce
export NCCL_IB_TIMEOUT=22  # profile roce
export NCCL_IB_RETRY_CNT=7  # profile roce
export NCCL_IB_QPS_PER_CONNECTION=2  # partition finetune
export NCCL_DEBUG=WARN  # profile roce
export UCX_IB_GID_INDEX=3  # profile roce

# --- binding: none (the command runs once, in the batch step) ---

# --- signal: forward SIGUSR2 and SIGTERM to the launcher, wait until it really exits ---
set +e
hpcjobs_child=""
hpcjobs_trapped=0
hpcjobs_status=0
hpcjobs_forward() {
  hpcjobs_trapped=1
  if [ -n "$hpcjobs_child" ]; then
    echo "hpcjobs: SIG$1 received, forwarding it to the launcher (pid $hpcjobs_child)" >&2
    kill -s "$1" "$hpcjobs_child" 2>/dev/null || true
  fi
}
trap 'hpcjobs_forward USR2' USR2
trap 'hpcjobs_forward TERM' TERM
hpcjobs_start() {
  # Become "$@" with the warning signal ignored: Slurm signals every process of a step, so
  # launchers (torchrun) must not die of it, and a program opts in by installing a handler.
  trap '' USR2
  exec "$@"
}
export -f hpcjobs_start
hpcjobs_wait() {
  # wait returns 128+N when a trapped signal interrupts it: keep waiting until the child is gone.
  local rc prev=""
  while :; do
    hpcjobs_trapped=0
    wait "$hpcjobs_child"
    rc=$?
    if [ "$rc" -eq 127 ] && [ -n "$prev" ]; then rc=$prev; break; fi
    if [ "$hpcjobs_trapped" -eq 0 ] || [ "$rc" -le 128 ]; then break; fi
    prev=$rc
  done
  hpcjobs_status=$rc
}

# --- launch: none ---
hpcjobs_start bash scripts/preprocess.sh --out /scratch/shards &
hpcjobs_child=$!
hpcjobs_wait

# --- requeue: decide whether this run comes back ---
# Policy: signal USR2 180 s before the limit; Slurm requeue off; budgets: preemption=50 timeout=10 node_failure=5 application=0.

# For now the job ends with the launcher's exit status.
exit "$hpcjobs_status"
# --- dry run: nothing was submitted; hpcjobs would run ---
# sbatch --job-name=preprocess --partition=finetune --nodes=1 --ntasks-per-node=1 --cpus-per-task=128 --time=00:20:00 --output=/home/user/hpcjobs/runs/preprocess/slurm-%j.out --open-mode=append --signal=B:USR2@180 --no-requeue SCRIPT
