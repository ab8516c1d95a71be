#!/bin/bash
# shellcheck disable=SC2317,SC2329,SC1091  # functions run in the ranks (through bash -c); site files are sourced
#SBATCH --job-name=pretrain-large
#SBATCH --partition=batch
#SBATCH --nodes=16
#SBATCH --ntasks-per-node=8
#SBATCH --cpus-per-task=28
#SBATCH --gpus-per-node=h100:8
#SBATCH --time=12:00:00
#SBATCH --output=/home/user/hpcjobs/runs/pretrain-large/slurm-%j.out
#SBATCH --open-mode=append
#SBATCH --signal=B:TERM@600
#SBATCH --requeue
#SBATCH --dependency=afterok:4242
#SBATCH --exclusive
#SBATCH --mem=0
#
# Job script rendered by hpcjobs for site dgx-h100-ib, partition batch.
# hpcjobs submits it with these options (they override the #SBATCH lines above):
#   sbatch --job-name=pretrain-large --partition=batch --nodes=16 --ntasks-per-node=8 --cpus-per-task=28 --gpus-per-node=h100:8 --time=12:00:00 --output=/home/user/hpcjobs/runs/pretrain-large/slurm-%j.out --open-mode=append --signal=B:TERM@600 --requeue --dependency=afterok:4242 --exclusive --mem=0 SCRIPT

# --- environment: modules, site setup, job variables ---
set -eo pipefail
module load cuda/12.4
module load nccl/2.21
source /etc/profile.d/dgx-site.sh
export WANDB_PROJECT='large runs'  # job
export HPCJOBS_JOB_OUTPUT_DIR=/home/user/hpcjobs/runs/pretrain-large
export HPCJOBS_CHECKPOINT_DIR=/home/user/hpcjobs/runs/pretrain-large/checkpoints
export HPCJOBS_SIGNAL=TERM
export HPCJOBS_GPU_MONITOR_INTERVAL=30
export HPCJOBS_GPU_QUERY=timestamp,index,uuid,utilization.gpu,memory.used,memory.total
export HPCJOBS_RUN_FINGERPRINT=a375907bb3b09945bdc4
export HPCJOBS_RUN_FILE=/home/user/hpcjobs/runs/pretrain-large/checkpoints/RUN
export HPCJOBS_PYTHON=python3
export PYTHONUNBUFFERED=1  # hpcjobs: logs reach the output file as they are written

# --- NCCL / UCX / Gloo tuning (origin after each value) ---
export NCCL_IB_HCA='=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_7:1'  # topology dgx-h100
export UCX_NET_DEVICES=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_7:1  # topology dgx-h100
export NCCL_NET_GDR_LEVEL=PHB  # topology dgx-h100
export NCCL_SOCKET_IFNAME=bond0  # topology dgx-h100
export GLOO_SOCKET_IFNAME=bond0  # topology dgx-h100
export NCCL_IB_RETRY_CNT=7  # profile production
export NCCL_IB_QPS_PER_CONNECTION=4  # profile production
export NCCL_IB_SPLIT_DATA_ON_QPS=0  # profile production
export NCCL_IB_ADAPTIVE_ROUTING=1  # profile production
export NCCL_CROSS_NIC=0  # profile production
export NCCL_NVLS_ENABLE=1  # profile production
export NCCL_DEBUG=WARN  # profile production
export TORCH_NCCL_ASYNC_ERROR_HANDLING=1  # profile production
export UCX_TLS=rc,cuda_copy  # profile production
export NCCL_IB_TIMEOUT=20  # user override

# --- binding: rank variables and per-rank placement on topology dgx-h100 ---
# Planned placement when the job gets the node's GPUs in order:
#   local rank 0: GPU 0 | CPUs 0-13,112-125 | memory node 0 | NIC mlx5_0:1
#   local rank 1: GPU 1 | CPUs 14-27,126-139 | memory node 0 | NIC mlx5_1:1
#   local rank 2: GPU 2 | CPUs 28-41,140-153 | memory node 0 | NIC mlx5_2:1
#   local rank 3: GPU 3 | CPUs 42-55,154-167 | memory node 0 | NIC mlx5_3:1
#   local rank 4: GPU 4 | CPUs 56-69,168-181 | memory node 1 | NIC mlx5_4:1
#   local rank 5: GPU 5 | CPUs 70-83,182-195 | memory node 1 | NIC mlx5_5:1
#   local rank 6: GPU 6 | CPUs 84-97,196-209 | memory node 1 | NIC mlx5_6:1
#   local rank 7: GPU 7 | CPUs 98-111,210-223 | memory node 1 | NIC mlx5_7:1
# A rank looks its GPUs up in the allocation Slurm made, so partial nodes bind correctly too.
hpcjobs_note() {
  # Placement problems are reported from the first node only, so a big job logs them once.
  if [ "${SLURM_NODEID:-0}" = 0 ]; then echo "hpcjobs: $*" >&2; fi
}
hpcjobs_bind_exec() {
  # Run "$@" bound to CPUs $1 and memory nodes $2. numactl is preferred, taskset binds CPUs
  # only; a binding that cannot be applied here is skipped, never fatal.
  local cpus=$1 mems=$2
  shift 2
  if [ -z "$cpus" ]; then exec -- "$@"; fi
  if command -v numactl >/dev/null 2>&1; then
    if [ -n "$mems" ] && numactl --physcpubind="$cpus" --membind="$mems" true 2>/dev/null; then
      exec numactl --physcpubind="$cpus" --membind="$mems" -- "$@"
    fi
    if numactl --physcpubind="$cpus" true 2>/dev/null; then
      exec numactl --physcpubind="$cpus" -- "$@"
    fi
  elif command -v taskset >/dev/null 2>&1; then
    if taskset -c "$cpus" true 2>/dev/null; then
      exec taskset -c -- "$cpus" "$@"
    fi
  else
    if [ "${LOCAL_RANK:-0}" = 0 ]; then
      hpcjobs_note "neither numactl nor taskset is installed on $(hostname): ranks run unbound"
    fi
    exec -- "$@"
  fi
  hpcjobs_note "cannot bind local rank ${LOCAL_RANK:-0} to CPUs $cpus on $(hostname): it runs unbound"
  exec -- "$@"
}
hpcjobs_rank() {
  # Runs as each rank: sets its variables and placement, then becomes "$@".
  export RANK="${SLURM_PROCID:-0}" LOCAL_RANK="${SLURM_LOCALID:-0}" WORLD_SIZE="${SLURM_NTASKS:-1}"
  export LOCAL_WORLD_SIZE=8 NODE_RANK="${SLURM_NODEID:-0}"
  # Its progress folder and a copy of its output (the launch block's hpcjobs_rank_setup).
  if declare -F hpcjobs_rank_setup >/dev/null; then hpcjobs_rank_setup; fi
  # Marked as this job's program: the warning goes to its processes that listen for it.
  export HPCJOBS_PROGRAM_OF="${HPCJOBS_PROGRAM_TOKEN:-}"
  local per=1 rank="${LOCAL_RANK:-0}" i idx gpu c m n
  local cpus="" mems="" nics="" visible=""
  local -a alloc vis
  IFS=, read -r -a alloc <<< "${SLURM_STEP_GPUS:-${SLURM_JOB_GPUS:-${CUDA_VISIBLE_DEVICES:-}}}"
  IFS=, read -r -a vis <<< "${CUDA_VISIBLE_DEVICES:-}"
  for (( i = 0; i < per; i++ )); do
    idx=$(( rank * per + i ))
    gpu=${alloc[idx]:-$idx}
    visible=${visible:+$visible,}${vis[idx]:-$gpu}
    case $gpu in
      0) c=0-13,112-125 m=0 n=mlx5_0:1 ;;
      1) c=14-27,126-139 m=0 n=mlx5_1:1 ;;
      2) c=28-41,140-153 m=0 n=mlx5_2:1 ;;
      3) c=42-55,154-167 m=0 n=mlx5_3:1 ;;
      4) c=56-69,168-181 m=1 n=mlx5_4:1 ;;
      5) c=70-83,182-195 m=1 n=mlx5_5:1 ;;
      6) c=84-97,196-209 m=1 n=mlx5_6:1 ;;
      7) c=98-111,210-223 m=1 n=mlx5_7:1 ;;
      *) c="" m="" n="" ;;
    esac
    if [ -n "$c" ]; then cpus=${cpus:+$cpus,}$c; fi
    if [ -n "$m" ]; then
      case ",$mems," in *",$m,"*) ;; *) mems=${mems:+$mems,}$m ;; esac
    fi
    if [ -n "$n" ]; then
      case ",$nics," in *",$n,"*) ;; *) nics=${nics:+$nics,}$n ;; esac
    fi
  done
  export CUDA_VISIBLE_DEVICES="$visible"
  if [ -n "$nics" ]; then export NCCL_IB_HCA="=$nics" UCX_NET_DEVICES="$nics"; fi
  hpcjobs_bind_exec "$cpus" "$mems" "$@"
}
export -f hpcjobs_rank hpcjobs_bind_exec hpcjobs_note
# Report once, from the batch step, what this host cannot bind; ranks then bind CPUs only.
if ! command -v numactl >/dev/null 2>&1; then
  echo "hpcjobs: numactl is not installed on $(hostname): ranks are bound to CPUs only" >&2
else
  if [ ! -d /sys/devices/system/node/node0 ]; then
    echo "hpcjobs: memory node 0 does not exist on $(hostname): its ranks are bound to CPUs only" >&2
  fi
  if [ ! -d /sys/devices/system/node/node1 ]; then
    echo "hpcjobs: memory node 1 does not exist on $(hostname): its ranks are bound to CPUs only" >&2
  fi
fi

# --- launch: srun, under the job's supervisor ---
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
# SIGTERM to the processes that listen for it, watches for
# stalls, and decides how the job goes on: finished,
# failed, or continued from its last checkpoint after a preemption, the time limit or a fault.
# It is Python (standard library only) that 'hpcjobs submit' (and 'render') writes next to the job's output.
hpcjobs_policy='{"budgets":{"application":0,"infrastructure":3,"node_failure":5,"preemption":20,"stall":3,"timeout":10},"format":1,"forward":["TERM"],"health_check":"","health_timeout":60,"job_expansion":null,"keep_out_faults":2,"keep_out_hours":24,"lead":600,"max_excluded":8,"max_total":null,"min_nodes":0,"node_multiple":1,"nodes":16,"patterns":[],"sbatch_args":["--job-name=pretrain-large","--partition=batch","--nodes=16","--ntasks-per-node=8","--cpus-per-task=28","--gpus-per-node=h100:8","--time=12:00:00","--output=/home/user/hpcjobs/runs/pretrain-large/slurm-%j.out","--open-mode=append","--signal=B:TERM@600","--requeue","--dependency=afterok:4242","--exclusive","--mem=0"],"signal":"TERM","spare_nodes":0,"stall_grace":10,"stall_timeout":1800,"standby":true,"storm_runs":3,"straggler_ratio":0.8,"straggler_window":60,"suspects_file":""}'
hpcjobs_supervisor=/home/user/hpcjobs/runs/pretrain-large/.hpcjobs/supervisor-HASH.pyz
if [ ! -r "$hpcjobs_supervisor" ] || ! "$HPCJOBS_PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 8))'; then
  echo "hpcjobs: cannot start the job's supervisor $hpcjobs_supervisor ('hpcjobs submit' and 'hpcjobs render' write it) with $HPCJOBS_PYTHON (the site's setup.python, Python 3.8 or newer)" >&2
  exit 2
fi
# shellcheck disable=SC2016
exec "$HPCJOBS_PYTHON" -E -s "$hpcjobs_supervisor" --script "$0" --policy "$hpcjobs_policy" -- \
  srun --nodes=16 --ntasks-per-node=8 --cpus-per-task=28 --kill-on-bad-exit=1 \
  bash -c 'hpcjobs_rank "$@"' hpcjobs-rank \
  python -m trainer.main --config 'configs/large model.yaml' --lr 3e-4
# --- dry run: nothing was submitted; hpcjobs would run (SUBMITDIR: <output dir>/submit-<time>-<token>) ---
# sbatch --parsable --job-name=pretrain-large --partition=batch --nodes=16 --ntasks-per-node=8 --cpus-per-task=28 --gpus-per-node=h100:8 --time=12:00:00 --output=/home/user/hpcjobs/runs/pretrain-large/slurm-%j.out --open-mode=append --signal=B:TERM@600 --requeue --exclusive --mem=0 --dependency=afterok:4242 '--comment=hpcjobs:<token>' SUBMITDIR/job.sh
