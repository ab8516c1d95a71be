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
export HPCJOBS_RUN_DIR=/home/user/hpcjobs/runs/pretrain-large
export HPCJOBS_CHECKPOINT_DIR=/home/user/hpcjobs/runs/pretrain-large/checkpoints
export HPCJOBS_SIGNAL=TERM
export HPCJOBS_GPU_MONITOR_INTERVAL=30
export HPCJOBS_GPU_QUERY=timestamp,index,uuid,utilization.gpu,memory.used,memory.total
export HPCJOBS_RUN_FINGERPRINT=a375907bb3b09945bdc4
export HPCJOBS_RUN_FILE=/home/user/hpcjobs/runs/pretrain-large/checkpoints/RUN
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
  # A copy of the rank's output, for telling a crash of the node from one of the program.
  if declare -F hpcjobs_capture_output >/dev/null; then hpcjobs_capture_output; fi
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

# --- signal: forward SIGTERM to the launcher, wait until it really exits ---
set +e
hpcjobs_child=""
hpcjobs_trapped=0
hpcjobs_status=0
hpcjobs_signal_seen=""
hpcjobs_signal_logged=""
hpcjobs_waiting=0
hpcjobs_forward() {
  hpcjobs_trapped=1
  # "warning" (preemption or the time limit is near) wins over a plain SIGTERM.
  if [ "$1" = TERM ] && [ "$1" != TERM ]; then
    hpcjobs_signal_seen=${hpcjobs_signal_seen:-term}
  else
    hpcjobs_signal_seen=warning
  fi
  if [ -n "$hpcjobs_child" ] && [ "$hpcjobs_waiting" = 1 ] && [ -z "$hpcjobs_signal_logged" ]; then
    # When the first signal came (hpcjobs report: time from the warning to the run's end).
    hpcjobs_signal_logged=1
    hpcjobs_event signal "$hpcjobs_signal_seen" "SIG$1" 2>/dev/null || true
  fi
  if [ -n "$hpcjobs_child" ]; then
    echo "hpcjobs: SIG$1 received, forwarding it to the launcher (pid $hpcjobs_child)" >&2
    kill -s "$1" "$hpcjobs_child" 2>/dev/null || true
  fi
}
trap 'hpcjobs_forward TERM' TERM
hpcjobs_start() {
  # Become "$@" with the warning signal ignored: Slurm signals every process of a step, so
  # launchers (torchrun) must not die of it, and a program opts in by installing a handler.
  exec -- "$@"
}
export -f hpcjobs_start
hpcjobs_wait() {
  # wait returns 128+N when a trapped signal interrupts it: keep waiting until the child is gone.
  local rc prev=""
  hpcjobs_waiting=1
  while :; do
    hpcjobs_trapped=0
    wait "$hpcjobs_child"
    rc=$?
    if [ "$rc" -eq 127 ] && [ -n "$prev" ]; then rc=$prev; break; fi
    if [ "$hpcjobs_trapped" -eq 0 ] || [ "$rc" -le 128 ]; then break; fi
    prev=$rc
  done
  hpcjobs_waiting=0
  hpcjobs_status=$rc
}

# --- requeue policy and event log (see docs/requeue.md) ---
HPCJOBS_SIGNAL_LEAD=600
# shellcheck disable=SC2034  # hpcjobs_budget reads them by name
declare HPCJOBS_MAX_REQUEUE_PREEMPTION=20 HPCJOBS_MAX_REQUEUE_TIMEOUT=10 HPCJOBS_MAX_REQUEUE_NODE_FAILURE=5 HPCJOBS_MAX_REQUEUE_INFRASTRUCTURE=3 HPCJOBS_MAX_REQUEUE_STALL=3 HPCJOBS_MAX_REQUEUE_APPLICATION=0
HPCJOBS_MAX_REQUEUES=''
# Faults without a warning: stall detection, exclusions, health check, crash signatures.
HPCJOBS_STANDBY=1
HPCJOBS_STALL_TIMEOUT=1800
HPCJOBS_STALL_GRACE=10
HPCJOBS_MAX_EXCLUDED=8
HPCJOBS_HEALTH_CHECK=''
HPCJOBS_HEALTH_TIMEOUT=60
HPCJOBS_INFRA_PATTERNS=('NET/IB(/GIN)? ?: Got completion from peer [^ ]+ with (error [0-9]+|status=)' 'NET/IB ?: ([^ ]+:[0-9]+ )?(Got (non-fatal )?async event|async fatal event)' 'NET/IB: (Fatal error[.] Detected [0-9]+ failed devices|The error is fatal|Device [0-9]+ marked as failed)|communicator encountered a fatal error \(detected in' 'unhandled system error|ncclSystemError: ' 'remote process exited or there was a network error|ncclRemoteError: ' 'NCCL WARN .*Connection closed by remote peer' 'Watchdog caught collective operation timeout|Some NCCL operations have failed or timed out' 'ProcessGroupNCCL'"'"'s watchdog got stuck for [0-9]+ seconds|Heartbeat monitor timed out' 'uncorrectable ECC error encountered|cudaErrorECCUncorrectable|CUDA_ERROR_ECC_UNCORRECTABLE' 'uncorrectable NVLink error detected|cudaErrorNvlinkUncorrectable' 'CUDA-capable device\(s\) is/are busy or unavailable' 'fallen off the bus|GPU is lost' 'NVRM: Xid \((PCI:)?[0-9a-fA-F:.]+\): (48|62|63|64|74|79|92|94|95|119|120|140|143|144|145|146|147|148|149|150|154),' 'DUE TO NODE FAILURE|UNCORRECTABLE MEMORY ERROR AT')
# The options its continuation job is submitted with (no options for the first submission only).
HPCJOBS_SBATCH_ARGS=(--job-name=pretrain-large --partition=batch --nodes=16 --ntasks-per-node=8 --cpus-per-task=28 --gpus-per-node=h100:8 --time=12:00:00 --output=/home/user/hpcjobs/runs/pretrain-large/slurm-%j.out --open-mode=append --signal=B:TERM@600 --requeue --dependency=afterok:4242 --exclusive --mem=0)
# # ---- hpcjobs requeue library (bash; needs scontrol, squeue, sbatch; sacct if present) ------
# Decides, after the workload exits, whether the job is finished, failed, or continues from its
# last checkpoint; keeps a per-job event log ("chain"); and resumes fast:
#   * preemption / timeout: a continuation job is submitted with --dependency=afterany:<this job>
#     and this job is marked Requeue=0, so Slurm does not also requeue it. The continuation
#     starts as soon as resources are free, instead of after Slurm's ~2 minute requeue hold.
#   * node failure (or a preemption whose grace time ran out): Slurm requeues the job itself
#     (same job id, SLURM_RESTART_COUNT+1); the event log records it and budgets apply.
# This is the policy that runs; tests/unit/requeue_reference.py restates it in Python.
# Inputs: HPCJOBS_RUN_DIR (shared folder for the event log), HPCJOBS_CHAIN_ROOT (set only
#         for continuations), HPCJOBS_CHECKPOINT_DIR, HPCJOBS_RUN_FINGERPRINT and
#         HPCJOBS_RUN_FILE (the run this job is, and the file naming the run that owns the
#         checkpoint folder; see hpcjobs.jobs.runfolder), HPCJOBS_SIGNAL_LEAD (s),
#         HPCJOBS_MAX_REQUEUE_<CAUSE> (one per cause), HPCJOBS_MAX_REQUEUES
#         (total, empty = no limit), and the array HPCJOBS_SBATCH_ARGS (this job's sbatch options).

hpcjobs_log() {
    printf '%s hpcjobs[%s]: %s\n' "$(date +%H:%M:%S)" "${SLURM_JOB_ID:-?}" "$*" >&2
}

# This run's job id as users write it: 1234, or 1234_7 for an array task.
hpcjobs_self_id() {
    if [[ -n ${SLURM_ARRAY_JOB_ID:-} && -n ${SLURM_ARRAY_TASK_ID:-} ]]; then
        echo "${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"
    else
        echo "${SLURM_JOB_ID:-0}"
    fi
}

# One event log per chain of runs, named after the chain's first job id.
hpcjobs_chain_file() {
    printf '%s/chain-%s.tsv' "$HPCJOBS_RUN_DIR" "${HPCJOBS_CHAIN_ROOT:-$(hpcjobs_self_id)}"
}

# hpcjobs_event EVENT CAUSE DETAIL [TIME]: one tab-separated line per event (TIME: epoch
# seconds when the event happened, if not now).
hpcjobs_event() {
    local detail=${3//[$'\t\n']/ }
    # umask 077: the log stays private also in an output folder that others may read.
    (umask 077 && printf '%s\t%s\t%s\t%s\t%s\t%s\n' "${4:-$(date +%s.%N)}" "$(hpcjobs_self_id)" \
        "${SLURM_RESTART_COUNT:-0}" "$1" "$2" "$detail" >>"$(hpcjobs_chain_file)")
}

# hpcjobs_count EVENT [CAUSE]: how many such events the chain has.
hpcjobs_count() {
    local file
    file=$(hpcjobs_chain_file)
    [[ -f $file ]] || { echo 0; return; }
    awk -F'\t' -v e="$1" -v c="${2:-}" '$4 == e && (c == "" || $5 == c) {n++} END {print n + 0}' "$file"
}

# The newest complete checkpoint step in HPCJOBS_CHECKPOINT_DIR, or -1.
hpcjobs_latest_step() {
    local dir step=-1 name
    for dir in "$HPCJOBS_CHECKPOINT_DIR"/step-*; do
        name=${dir##*/step-}
        [[ $name =~ ^[0-9]+$ && -f $dir/COMPLETE ]] || continue
        ((10#$name > step)) && step=$((10#$name))
    done
    echo "$step"
}

# The last step the application reported (CheckpointDir.note_progress), or -1.
hpcjobs_progress() {
    local value
    value=$(cat "$HPCJOBS_CHECKPOINT_DIR/PROGRESS" 2>/dev/null)
    [[ $value =~ ^[0-9]+$ ]] && echo "$value" || echo -1
}

# "checkpoint=<step> progress=<step>": where the job stands, for the event log.
hpcjobs_position() {
    echo "checkpoint=$(hpcjobs_latest_step) progress=$(hpcjobs_progress)"
}

hpcjobs_is_done() {
    [[ -f $HPCJOBS_CHECKPOINT_DIR/DONE || -f $HPCJOBS_RUN_DIR/DONE-$HPCJOBS_CHAIN_ROOT ]]
}

hpcjobs_mark_done() {
    (umask 077 && : >"$HPCJOBS_RUN_DIR/DONE-$HPCJOBS_CHAIN_ROOT")
}

# hpcjobs_budget CAUSE: the per-cause requeue budget. The batch script sets every one from the
# site config and the job (their defaults live in hpcjobs/config/models.py, MaxRequeues, and
# nowhere else); one that is not set allows no requeue.
hpcjobs_budget() {
    local name
    [[ $1 =~ ^[a-z_]+$ ]] || { echo 0; return; }
    name=HPCJOBS_MAX_REQUEUE_${1^^}
    echo "${!name:-0}"
}

# The first run of a chain finds no log of its own: one already there belongs to an earlier job
# that had the same id (ids repeat when a cluster's job counter is reset). Set it aside.
hpcjobs_set_aside_stale() {
    local file stamp
    file=$(hpcjobs_chain_file)
    stamp=$(date +%s)
    if [[ -e $file ]]; then
        mv -f "$file" "$file.stale-$stamp"
        hpcjobs_log "set aside an event log left by an earlier job $HPCJOBS_CHAIN_ROOT"
    fi
    if [[ -e $HPCJOBS_RUN_DIR/progress-$HPCJOBS_CHAIN_ROOT ]]; then
        mv -f "$HPCJOBS_RUN_DIR/progress-$HPCJOBS_CHAIN_ROOT" \
            "$HPCJOBS_RUN_DIR/progress-$HPCJOBS_CHAIN_ROOT.stale-$stamp"
    fi
    if [[ -e $HPCJOBS_RUN_DIR/DONE-$HPCJOBS_CHAIN_ROOT ]]; then
        mv -f "$HPCJOBS_RUN_DIR/DONE-$HPCJOBS_CHAIN_ROOT" \
            "$HPCJOBS_RUN_DIR/DONE-$HPCJOBS_CHAIN_ROOT.stale-$stamp"
    fi
}

# hpcjobs_check_checkpoint_dir: the checkpoint folder can be created and written, and belongs
# to this run. Ends the chain (the command never starts) when it cannot be used or when another
# run has taken it over since this job was submitted.
hpcjobs_check_checkpoint_dir() {
    local err owner tmp
    if ! err=$( (umask 077 && mkdir -p -- "$HPCJOBS_CHECKPOINT_DIR") 2>&1) ||
        [[ ! -w $HPCJOBS_CHECKPOINT_DIR ]]; then
        err=${err:-not writable}
        err=${err//[$'\t\n']/ }
        hpcjobs_event end fail "checkpoint folder unusable: $HPCJOBS_CHECKPOINT_DIR: $err"
        hpcjobs_log "cannot use the checkpoint folder $HPCJOBS_CHECKPOINT_DIR ($err); the command was not started"
        hpcjobs_chain_ends
        exit 1
    fi
    [[ -n ${HPCJOBS_RUN_FINGERPRINT:-} && -n ${HPCJOBS_RUN_FILE:-} ]] || return 0
    if [[ -f $HPCJOBS_RUN_FILE ]]; then
        # Builtins only: a cancel's SIGTERM reaches every process of the job, and a reader
        # killed by it would make the folder look owned by another run.
        local line pattern='"fingerprint": *"([0-9a-f]*)"'
        owner=""
        while IFS= read -r line || [[ -n $line ]]; do
            [[ $line =~ $pattern ]] && owner=${BASH_REMATCH[1]}
        done 2>/dev/null <"$HPCJOBS_RUN_FILE"
        if [[ $owner != "$HPCJOBS_RUN_FINGERPRINT" ]]; then
            hpcjobs_event end fail "checkpoint folder owned by another run: $HPCJOBS_RUN_FILE names run ${owner:-?}, this job is run $HPCJOBS_RUN_FINGERPRINT"
            hpcjobs_log "the checkpoint folder now belongs to another run ($HPCJOBS_RUN_FILE); the command was not started"
            hpcjobs_chain_ends
            exit 1
        fi
        return 0
    fi
    # Submitted without 'hpcjobs submit' (sbatch job.sh): claim the folder for this run.
    tmp="$HPCJOBS_RUN_FILE.tmp-$$"
    if (umask 077 && printf '{"claimed_by_job": "%s", "fingerprint": "%s", "format": 1}\n' \
        "$(hpcjobs_self_id)" "$HPCJOBS_RUN_FINGERPRINT" >"$tmp") 2>/dev/null; then
        mv -f "$tmp" "$HPCJOBS_RUN_FILE"
    else
        hpcjobs_log "could not write $HPCJOBS_RUN_FILE"
    fi
}

# hpcjobs_gpu_monitor: sample the job's GPUs for 'hpcjobs report' every
# HPCJOBS_GPU_MONITOR_INTERVAL seconds (0: off), the fields HPCJOBS_GPU_QUERY, into
# gpu-<root>/<node>.csv next to the event log (the Slurm node name), while the job runs; only
# where nvidia-smi exists.
# On more than one node the samplers run in a job step of their own, one task per node, that
# overlaps the job's other steps (srun --overlap shares CPUs, memory and GPUs with them).
hpcjobs_gpu_monitor() {
    local every=${HPCJOBS_GPU_MONITOR_INTERVAL:-0} folder nodes=${SLURM_JOB_NUM_NODES:-1}
    [[ $every =~ ^[0-9]+$ ]] && ((every > 0)) && [[ -n ${HPCJOBS_GPU_QUERY:-} ]] || return 0
    command -v nvidia-smi >/dev/null 2>&1 || return 0
    folder=$HPCJOBS_RUN_DIR/gpu-$HPCJOBS_CHAIN_ROOT
    (umask 077 && mkdir -p -- "$folder") 2>/dev/null || return 0
    local sample=(nvidia-smi "--query-gpu=$HPCJOBS_GPU_QUERY" "--format=csv,noheader,nounits" -l "$every")
    # shellcheck disable=SC2016 # expanded by the bash on each node
    local per_node='exec "$@" >>"$0/${SLURMD_NODENAME:-$(hostname -s)}.csv" 2>/dev/null'
    if [[ $nodes =~ ^[0-9]+$ ]] && ((nodes > 1)) && command -v srun >/dev/null 2>&1; then
        (umask 077 && exec srun --overlap --nodes="$nodes" --ntasks="$nodes" --ntasks-per-node=1 \
            --job-name=hpcjobs-gpu-monitor --kill-on-bad-exit=0 --quiet \
            bash -c "$per_node" "$folder" "${sample[@]}" 2>/dev/null) &
    else
        (umask 077 && exec bash -c "$per_node" "$folder" "${sample[@]}") &
    fi
    hpcjobs_gpu_pid=$!
}

# hpcjobs_gpu_monitor_stop: end the sampler (hpcjobs_finish calls it first).
hpcjobs_gpu_monitor_stop() {
    [[ -n ${hpcjobs_gpu_pid:-} ]] && kill "$hpcjobs_gpu_pid" 2>/dev/null
    return 0
}

# hpcjobs_begin: call once at the top of the job, before the workload starts.
# Exits the job when it is already finished or out of budget.
# hpcjobs_private_logs: Slurm creates the job's output files with the job's umask; make them
# private, as everything else hpcjobs writes (the output folder may be readable by others).
# Also notes the job's stderr file (hpcjobs_err_file), where srun reports its tasks' ends.
hpcjobs_private_logs() {
    local info path
    info=$(timeout 20 scontrol show job "$SLURM_JOB_ID" 2>/dev/null) || return 0
    # Each of StdOut= and StdErr= has a line of its own; a job name cannot fake one.
    while read -r path; do
        [[ -f $path && -O $path ]] && chmod go-rwx -- "$path" 2>/dev/null
    done < <(sed -n 's/^[[:space:]]\{1,\}Std\(Out\|Err\)=//p' <<<"$info")
    # Without --error, stderr goes to the stdout file: Slurm 26.05 prints an empty StdErr= then.
    hpcjobs_err_file=$(sed -n 's/^[[:space:]]\{1,\}StdErr=//p' <<<"$info" | head -n 1)
    [[ -n $hpcjobs_err_file && $hpcjobs_err_file != "(null)" ]] ||
        hpcjobs_err_file=$(sed -n 's/^[[:space:]]\{1,\}StdOut=//p' <<<"$info" | head -n 1)
    return 0
}

hpcjobs_begin() {
    (umask 077 && mkdir -p -- "$HPCJOBS_RUN_DIR")
    hpcjobs_private_logs
    # A continuation carries its chain's root; anything else starts a chain of its own.
    local self
    self=$(hpcjobs_self_id)
    if [[ -n ${HPCJOBS_CHAIN_ROOT:-} ]] &&
        ! grep -q "\(continued as\|standby\) job ${SLURM_ARRAY_JOB_ID:-${SLURM_JOB_ID:-x}}\( \|\$\|_\)" "$(hpcjobs_chain_file)" 2>/dev/null; then
        HPCJOBS_CHAIN_ROOT=$self
        unset HPCJOBS_STANDBY_FOR
    fi
    export HPCJOBS_CHAIN_ROOT=${HPCJOBS_CHAIN_ROOT:-$self}
    if [[ $HPCJOBS_CHAIN_ROOT == "$self" ]] && ((${SLURM_RESTART_COUNT:-0} == 0)); then
        hpcjobs_set_aside_stale
    fi
    # Per-rank progress reports (hpcjobs.runtime.progress), next to the event log: one folder per chain.
    export HPCJOBS_PROGRESS_DIR=$HPCJOBS_RUN_DIR/progress-$HPCJOBS_CHAIN_ROOT
    (umask 077 && mkdir -p -- "$HPCJOBS_PROGRESS_DIR") 2>/dev/null || true
    hpcjobs_check_checkpoint_dir
    if [[ -n ${HPCJOBS_STANDBY_FOR:-} ]] && ((${SLURM_RESTART_COUNT:-0} == 0)) && ! hpcjobs_is_done; then
        hpcjobs_after_standby_release
    fi
    if ((${SLURM_RESTART_COUNT:-0} > 0)) && ! hpcjobs_is_done; then
        hpcjobs_after_slurm_requeue
    fi
    # Runs before this one: starts in the log, or Slurm's own count if that is higher.
    local starts
    starts=$(hpcjobs_count start)
    export HPCJOBS_RESTART_COUNT=$((starts > ${SLURM_RESTART_COUNT:-0} ? starts : ${SLURM_RESTART_COUNT:-0}))
    if hpcjobs_is_done; then
        hpcjobs_event end finish "done marker present"
        hpcjobs_log "the job already finished (done marker present); nothing to do"
        hpcjobs_chain_ends
        exit 0
    fi
    hpcjobs_handoff_if_excluded
    local step
    step=$(hpcjobs_latest_step)
    hpcjobs_faults_begin
    hpcjobs_gpu_monitor # from here on every run ends in hpcjobs_finish, which stops it
    hpcjobs_standby_submit # before 'start': from 'start' on, the workload runs at once
    hpcjobs_event start - "checkpoint=$step nodes=${SLURM_JOB_NODELIST:-?} batch=${SLURMD_NODENAME:-?}"
    # The marker 'hpcjobs logs --restart N' splits the log on.
    echo "hpcjobs: run $HPCJOBS_RESTART_COUNT of job $HPCJOBS_CHAIN_ROOT"
    if ((step >= 0)); then
        hpcjobs_log "run $HPCJOBS_RESTART_COUNT of chain $HPCJOBS_CHAIN_ROOT; resuming from checkpoint step $step"
    else
        hpcjobs_log "run $HPCJOBS_RESTART_COUNT of chain $HPCJOBS_CHAIN_ROOT; no checkpoint yet"
    fi
}

# hpcjobs_run_state N: "STATE|END" of this job's run N (1 = first) from accounting, or nothing
# (no slurmdbd, or it has not recorded the run yet).
hpcjobs_run_state() {
    timeout 20 sacct -n -X -D -P -j "$SLURM_JOB_ID" -o State,End 2>/dev/null | sed -n "${1}p"
}

# hpcjobs_requeue_cause STATE SIGNAL: the cause of a requeue that Slurm did by itself.
# PREEMPTED: the grace time ran out before the job ended. NODE_FAIL, an admin's requeue, or
# no record: node_failure (a warning signal before the requeue still means preemption).
hpcjobs_requeue_cause() {
    case ${1%% *} in
        PREEMPTED) echo preemption ;;
        NODE_FAIL) echo node_failure ;;
        *) [[ ${2:-} == warning ]] && echo preemption || echo node_failure ;;
    esac
}

# hpcjobs_after_slurm_requeue: this run is a Slurm requeue of the job (SLURM_RESTART_COUNT > 0).
# Records it unless the previous run already did, and enforces the budgets. Exits when this run
# must not go on.
hpcjobs_after_slurm_requeue() {
    local file last event cause detail self next run when
    file=$(hpcjobs_chain_file)
    # The last event that says how a run ended (a signal event may come after it).
    [[ -f $file ]] && last=$(awk -F'\t' '$4 != "signal"' "$file" | tail -n 1)
    IFS=$'\t' read -r _ _ _ event cause detail <<<"${last:-}"
    self=$(hpcjobs_self_id)
    if [[ $event == requeue && $detail == "continued as job "* ]]; then
        next=${detail#continued as job }
        next=${next%% *}
        if [[ $next != "$self" ]]; then
            # The previous run continued in another job, yet Slurm requeued this one too (the
            # Requeue=0 update failed or came too late). Never run the chain twice.
            hpcjobs_log "Slurm requeued this job, but the chain already continues as job $next; exiting"
            hpcjobs_chain_ends
            exit 0
        fi
        event="" # the continuation's first run was lost before it began: record the requeue
    fi
    if [[ $event != requeue || $detail != "requeued by Slurm"* ]]; then
        # The previous run ended without a word (its batch host died, or it was killed): ask
        # accounting how it ended, and date the requeue from the end of that run.
        run=$(hpcjobs_run_state "${SLURM_RESTART_COUNT}")
        cause=$(hpcjobs_requeue_cause "${run%%|*}" "")
        when=""
        [[ $run == *"|"* ]] && when=$(date -d "${run#*|}" +%s 2>/dev/null)
        hpcjobs_event requeue "$cause" \
            "requeued by Slurm (restart ${SLURM_RESTART_COUNT}) $(hpcjobs_position)" "$when"
    fi
    hpcjobs_enforce_budget "$cause"
}

# hpcjobs_seconds D-HH:MM:SS|HH:MM:SS|MM:SS -> seconds (empty for UNLIMITED/unknown).
hpcjobs_seconds() {
    local t=$1 days=0 h=0 m=0 s=0
    [[ $t =~ ^[0-9] ]] || return 0
    if [[ $t == *-* ]]; then days=${t%%-*}; t=${t#*-}; fi
    IFS=: read -r -a parts <<<"$t"
    case ${#parts[@]} in
        3) h=${parts[0]}; m=${parts[1]}; s=${parts[2]} ;;
        2) m=${parts[0]}; s=${parts[1]} ;;
        1) s=${parts[0]} ;;
    esac
    echo $((10#$days * 86400 + 10#$h * 3600 + 10#$m * 60 + 10#$s))
}

# hpcjobs_field INFO KEY: the value of KEY= in 'scontrol show' output INFO. The last one wins,
# as in hpcjobs.slurm.parse, so a job name holding " KEY=..." cannot fake it; a key that only
# ends another one (NodeList in ReqNodeList) does not count.
hpcjobs_field() {
    grep -oE "(^|[[:space:]])$2=[^[:space:]]*" <<<"$1" | tail -n 1 | sed 's/^[[:space:]]*[^=]*=//'
}

# hpcjobs_cause RC SIGNAL: preemption | timeout | node_failure | cancelled | none | application, or
# requeued_preemption | requeued_node_failure when Slurm has already requeued the job itself.
hpcjobs_cause() {
    local rc=$1 signal=$2 left info restarts
    info=$(scontrol show job "$SLURM_JOB_ID" 2>/dev/null)
    # Slurm counts a requeue as soon as it decides it (node failure, preemption grace time over,
    # an admin's requeue): the job comes back with the same id, so no continuation is needed,
    # and the program's exit (0 after a checkpoint) must not mark the job done.
    restarts=$(hpcjobs_field "$info" Restarts)
    if [[ $restarts =~ ^[0-9]+$ ]] && ((restarts > ${SLURM_RESTART_COUNT:-0})); then
        echo "requeued_$(hpcjobs_requeue_cause "$(hpcjobs_run_state $((${SLURM_RESTART_COUNT:-0} + 1)))" "$signal")"
        return
    fi
    # A node of the job failed: Slurm is killing the job (this batch host lived on). The job
    # shows COMPLETING with Reason=NodeDown by now, and srun has said which node.
    if grep -qE 'JobState=NODE_FAIL|Reason=NodeDown' <<<"$info" ||
        [[ -n $(hpcjobs_node_failure_lines) ]]; then
        echo node_failure
        return
    fi
    if grep -qE 'PreemptTime=[0-9]' <<<"$info"; then
        echo preemption
        return
    fi
    # scancel: steps get SIGTERM, so the program may exit cleanly before the shell hears of it
    # (and where the warning signal is TERM, the shell takes it for a warning).
    if hpcjobs_was_cancelled "$SLURM_JOB_ID" "$info"; then
        echo cancelled
        return
    fi
    if [[ $signal == warning ]]; then
        left=$(hpcjobs_seconds "$(squeue -h -j "$SLURM_JOB_ID" -o %L 2>/dev/null)")
        if [[ -n $left ]] && ((left <= ${HPCJOBS_SIGNAL_LEAD:-300} + 120)); then
            echo timeout
        else
            echo preemption # the warning signal sent by hand: checkpoint and come back
        fi
        return
    fi
    if [[ $signal == term ]]; then
        echo cancelled
    elif ((rc == 0)); then
        echo none
    else
        echo application
    fi
}

# Tell Slurm not to requeue this job: after a preemption, Slurm >= 24.05 requeues a job that exits
# during the grace time, whatever its exit code.
hpcjobs_no_slurm_requeue() {
    [[ -n ${hpcjobs_requeue_off:-} ]] && return 0 # done when the standby was submitted
    if ! scontrol update "jobid=$SLURM_JOB_ID" Requeue=0 >/dev/null 2>&1; then
        hpcjobs_log "could not mark job $SLURM_JOB_ID Requeue=0; Slurm may also requeue it"
    fi
}

# hpcjobs_chain_ends: the chain ends with this run (finished, failed, or it goes on elsewhere).
# Slurm 24.11 requeues the run that follows its own requeue of a preempted job once more when
# that run exits, whatever its exit code (accounting records it PREEMPTED): the job would come
# back after Slurm's ~2 minute hold only to find the chain ended. Runs Slurm never requeued
# (SLURM_RESTART_COUNT=0) are left alone: they need no extra call to the controller.
# It also lets go of what only a chain that goes on needs (hpcjobs_chain_over).
hpcjobs_chain_ends() {
    hpcjobs_chain_over
    if ((${SLURM_RESTART_COUNT:-0} > 0)); then
        hpcjobs_no_slurm_requeue
    fi
    return 0
}

# hpcjobs_continue CAUSE: make the standby this run's continuation (or submit one, with
# --dependency=afterany:<this job>), on nodes without the excluded ones, and stop Slurm
# requeueing this job. The continuation gets this job's options (hpcjobs_successor_args).
hpcjobs_continue() {
    local new how=""
    if [[ -n ${hpcjobs_standby:-} ]] && ! hpcjobs_claim_takeover "$hpcjobs_standby"; then
        return 0 # the standby has taken over and logged it
    fi
    if new=$(hpcjobs_standby_retarget); then
        how=" (the standby)"
    elif ! new=$(hpcjobs_submit_next "afterany:$SLURM_JOB_ID" ""); then
        hpcjobs_log "could not submit the continuation ($new); falling back to Slurm's requeue"
        hpcjobs_standby_cancel
        hpcjobs_event requeue "$1" "requeued by Slurm (fallback) $(hpcjobs_position)"
        scontrol requeue "$SLURM_JOB_ID" >/dev/null 2>&1 || hpcjobs_log "scontrol requeue failed too"
        return 0
    else
        hpcjobs_standby_cancel
    fi
    hpcjobs_no_slurm_requeue
    hpcjobs_event requeue "$1" "continued as job $new$how $(hpcjobs_position)"
    hpcjobs_log "$1: continuing as job $new$how (starts when resources are free)"
    return 0
}

# hpcjobs_finish RC SIGNAL: decide and act after the workload exited. Prints the job's exit code.
hpcjobs_finish() {
    local rc=$1 signal=$2 cause used allowed total suspect="" evidence="" stall crash
    hpcjobs_gpu_monitor_stop
    hpcjobs_stall_stop
    if hpcjobs_is_done; then
        hpcjobs_event end finish "done marker present"
        hpcjobs_chain_ends
        echo 0
        return
    fi
    cause=$(hpcjobs_cause "$rc" "$signal")
    stall=$(hpcjobs_stalled)
    if [[ -n $stall && $cause != requeued_* && $cause != cancelled ]]; then
        # The stall watcher ended the run (its warning signal makes this look like a preemption).
        local rank step idle tied
        IFS=$'\t' read -r suspect rank step idle tied <<<"$stall"
        [[ $suspect == - ]] && suspect=""
        cause=stall
        evidence="rank $rank at step $step for ${idle} s"
        ((tied > 0)) && evidence+=" ($tied other rank(s) tied with it: no node blamed)"
    elif [[ $cause == application ]]; then
        crash=$(hpcjobs_crash)
        IFS=$'\t' read -r cause suspect evidence <<<"$crash"
        [[ $suspect == - ]] && suspect=""
        [[ $evidence == - ]] && evidence=""
        if [[ $cause == infrastructure ]]; then
            hpcjobs_fault_log infrastructure "$suspect" "$evidence"
        elif [[ -n $evidence ]]; then
            hpcjobs_log "application failure: $evidence (no infrastructure signature; no node blamed)"
        fi
    fi
    [[ $cause == stall ]] && hpcjobs_fault_log stall "$suspect" "$evidence"
    if [[ $cause == node_failure ]]; then
        # The standby may be logging this already (hpcjobs_claim_takeover): then leave it to it.
        if [[ -n ${hpcjobs_standby:-} ]] && ! hpcjobs_claim_takeover "$hpcjobs_standby"; then
            echo "$rc"
            return
        fi
        suspect=$(hpcjobs_failed_nodes "$SLURM_JOB_ID" "${SLURM_JOB_NODELIST:-}" "" | paste -sd, -)
        hpcjobs_fault_log node_failure "$suspect" "srun: error: Node failure on ${suspect:-?}"
        [[ -n $suspect ]] && hpcjobs_exclude node_failure "${suspect//,/ }" >&2
    fi
    case $cause in
        requeued_*)
            cause=${cause#requeued_}
            hpcjobs_event requeue "$cause" \
                "requeued by Slurm (restart $((${SLURM_RESTART_COUNT:-0} + 1))) $(hpcjobs_position)"
            hpcjobs_log "$cause: Slurm requeued this job itself; its next run resumes from the last checkpoint"
            echo "$rc"
            return
            ;;
        none)
            hpcjobs_mark_done
            hpcjobs_event end finish "completed"
            hpcjobs_chain_ends
            echo 0
            return
            ;;
        cancelled)
            hpcjobs_event end fail "cancelled"
            hpcjobs_chain_over
            echo $((rc ? rc : 143))
            return
            ;;
    esac
    used=$(hpcjobs_count requeue "$cause")
    allowed=$(hpcjobs_budget "$cause")
    total=$(hpcjobs_count requeue)
    if [[ -n ${HPCJOBS_MAX_REQUEUES:-} ]] && ((total >= HPCJOBS_MAX_REQUEUES)); then
        hpcjobs_event end fail "requeue budget exhausted: $total/$HPCJOBS_MAX_REQUEUES requeues in total"
        hpcjobs_no_requeue_after "$cause"
        hpcjobs_log "$cause, but the total requeue budget is exhausted ($total/$HPCJOBS_MAX_REQUEUES)"
        echo $((rc ? rc : 1))
        return
    fi
    if ((used >= allowed)); then
        if ((allowed == 0)) && [[ $cause == application ]]; then
            hpcjobs_event end fail "application failed with exit code $rc (not requeued)"
        else
            hpcjobs_event end fail "requeue budget for $cause exhausted: $used/$allowed"
        fi
        hpcjobs_no_requeue_after "$cause"
        hpcjobs_log "$cause (exit code $rc); not requeued ($used/$allowed requeues used)"
        echo $((rc ? rc : 1))
        return
    fi
    if [[ $cause == infrastructure || $cause == stall ]]; then
        hpcjobs_fault_exclude "$cause" "$suspect" >&2
    fi
    hpcjobs_continue "$cause" >&2
    echo 0
}

# hpcjobs_no_requeue_after CAUSE: the chain ends with this run although Slurm may still want
# to requeue it (a preemption).
hpcjobs_no_requeue_after() {
    if [[ $1 == preemption ]]; then
        hpcjobs_no_slurm_requeue
        hpcjobs_chain_over
    else
        hpcjobs_chain_ends
    fi
}
# ---- end of hpcjobs requeue library ----------------------------------------------------------
# 
# # ---- hpcjobs fault library (bash; needs scontrol, squeue, sbatch, scancel, srun) ------------
# Recovers a chain from the faults Slurm does not announce (docs/requeue.md, "Faults without a
# warning"):
#   * a standby: every run keeps one pending successor (--dependency=afternotok:<run>) that
#     Slurm starts the moment the run dies without a word (a dead node, the batch host too).
#     A run that ends by itself retargets it (afterany) or cancels it;
#   * crash classification: a non-zero exit whose first failing task's output shows an
#     infrastructure signature (NCCL/IB, the PyTorch watchdog, CUDA/Xid), or that was killed by
#     SIGBUS/SIGKILL, is cause 'infrastructure', and that task's node is the suspect;
#   * stall detection: a rank whose progress report ($HPCJOBS_PROGRESS_DIR/rank-<RANK>) has not
#     advanced for HPCJOBS_STALL_TIMEOUT s ends the run as cause 'stall'; its node is the
#     suspect (from the report, else from where the rank was started);
#   * exclusions: suspects and failed nodes are left out of every later run (bounded).
# Inputs: HPCJOBS_STANDBY (1: keep a standby; 0 for --no-requeue), HPCJOBS_STALL_TIMEOUT (s,
#         0 = off), HPCJOBS_STALL_GRACE (s), HPCJOBS_MAX_EXCLUDED,
#         HPCJOBS_HEALTH_CHECK (shell command run on a suspect; empty = none),
#         HPCJOBS_HEALTH_TIMEOUT (s), the array HPCJOBS_INFRA_PATTERNS (extended regular
#         expressions), HPCJOBS_STANDBY_FOR (set only in a standby: the run it stands by for),
#         HPCJOBS_FINAL_STATE_WAIT (s, 60: how long a standby waits to learn how its
#         predecessor ended).

# The folder where each rank's output is copied during a run (for classifying a crash).
hpcjobs_capture_dir() {
    printf '%s/capture-%s' "$HPCJOBS_RUN_DIR" "$HPCJOBS_CHAIN_ROOT"
}

# hpcjobs_capture_output: runs in each rank before it becomes the program. Copies the rank's
# stdout and stderr, unchanged, to <capture dir>/<node>.rank-<RANK>. tee ignores the signals
# Slurm sends every process of a step, so it lives as long as the rank writes, and it writes
# each chunk as soon as it reads it: a rank's last words are kept even when srun kills the
# step right after the rank exits (srun may drop them from the job's own log then).
hpcjobs_capture_output() {
    local dir=${HPCJOBS_CAPTURE_DIR:-} file
    [[ -n $dir && -d $dir ]] || return 0
    file="$dir/${SLURMD_NODENAME:-$(hostname -s)}.rank-${RANK:-${SLURM_PROCID:-0}}"
    (umask 077 && : >>"$file") 2>/dev/null || return 0
    exec 2> >(trap '' TERM INT HUP QUIT USR1 USR2 && exec tee -a -- "$file" >&2) \
        > >(trap '' TERM INT HUP QUIT USR1 USR2 && exec tee -a -- "$file")
}
export -f hpcjobs_capture_output

# hpcjobs_faults_begin: before the workload starts (called by hpcjobs_begin). Empties the
# capture folder, notes where this run's part of the job's stderr begins, and marks the time
# progress reports must be newer than to count for this run.
hpcjobs_faults_begin() {
    local dir
    dir=$(hpcjobs_capture_dir)
    rm -rf -- "$dir" 2>/dev/null
    if (umask 077 && mkdir -p -- "$dir") 2>/dev/null; then
        export HPCJOBS_CAPTURE_DIR=$dir
    fi
    hpcjobs_err_offset=0
    if [[ -n ${hpcjobs_err_file:-} && -f $hpcjobs_err_file ]]; then
        hpcjobs_err_offset=$(stat -c %s -- "$hpcjobs_err_file" 2>/dev/null || echo 0)
    fi
    # This run has begun: whoever logged how the run before it ended is settled.
    rmdir -- "$HPCJOBS_RUN_DIR/.takeover-$(hpcjobs_self_id)" 2>/dev/null
    hpcjobs_run_mark="$HPCJOBS_PROGRESS_DIR/.run-$(hpcjobs_self_id)"
    (umask 077 && : >"$hpcjobs_run_mark") 2>/dev/null
    rm -f -- "$(hpcjobs_stall_file)" 2>/dev/null
    return 0
}

# hpcjobs_chain_over: nothing of the chain runs after this run: its standby is cancelled and
# the copies of the ranks' output go.
hpcjobs_chain_over() {
    hpcjobs_standby_cancel
    hpcjobs_faults_cleanup
}

# hpcjobs_faults_cleanup: the chain is over; its rank output copies go.
hpcjobs_faults_cleanup() {
    rm -rf -- "$(hpcjobs_capture_dir)" "$(hpcjobs_stall_file)" 2>/dev/null
    [[ -n ${hpcjobs_run_mark:-} ]] && rm -f -- "$hpcjobs_run_mark" 2>/dev/null
    return 0
}

# ---- the standby ----------------------------------------------------------------------------

# hpcjobs_successor_args: this job's sbatch options for a job that continues its chain (the
# renderer has left out the ones for the first submission only), in the array
# hpcjobs_next_args. Array, dependency and exclusions are set here; the comment carries the
# chain's token; every run of the chain appends to the first run's log files.
hpcjobs_successor_args() {
    local arg skip=0 comment root=${HPCJOBS_CHAIN_ROOT:-$(hpcjobs_self_id)} exclude
    hpcjobs_next_args=()
    exclude=$(hpcjobs_excluded)
    for arg in "${HPCJOBS_SBATCH_ARGS[@]}"; do
        if ((skip)); then skip=0; continue; fi
        case $arg in
            --array=* | --dependency=* | --comment=* | --kill-on-invalid-dep=*) continue ;;
            -a | -d | --array | --dependency | --comment) skip=1; continue ;;
            -a* | -d*) continue ;;
            --exclude=*) exclude=${exclude:+$exclude,}${arg#--exclude=}; continue ;;
            --output=* | --error=*)
                arg=${arg//%j/$root}
                arg=${arg//%A/${root%%_*}}
                ;;
        esac
        hpcjobs_next_args+=("$arg")
    done
    [[ -n $exclude ]] && hpcjobs_next_args+=("--exclude=$exclude")
    [[ -n ${SLURM_ARRAY_TASK_ID:-} ]] && hpcjobs_next_args+=("--array=$SLURM_ARRAY_TASK_ID")
    comment=$(timeout 20 squeue -h -j "$SLURM_JOB_ID" -o %k 2>/dev/null | head -n 1)
    [[ -n $comment && $comment != "(null)" ]] && hpcjobs_next_args+=("--comment=$comment")
    return 0
}

# hpcjobs_submit_next DEPENDENCY [STANDBY_FOR] [SBATCH OPTION...]: submit a job that continues
# this chain once DEPENDENCY holds; prints its id (1234, or 1234_7 for an array task).
# STANDBY_FOR (may be empty) marks it as the standby of that run.
hpcjobs_submit_next() {
    local dependency=$1 standby_for=${2:-} new name unset_vars=(-u HPCJOBS_STANDBY_FOR)
    shift 2
    hpcjobs_successor_args
    # A clean environment: the new job must not inherit this job's SLURM_* settings.
    for name in $(compgen -e); do
        [[ $name =~ ^(SLURM|SBATCH|SALLOC|SRUN)_ && $name != SLURM_CONF ]] && unset_vars+=(-u "$name")
    done
    local marks=("HPCJOBS_CHAIN_ROOT=${HPCJOBS_CHAIN_ROOT:-$(hpcjobs_self_id)}")
    [[ -n $standby_for ]] && marks+=("HPCJOBS_STANDBY_FOR=$standby_for")
    new=$(cd "${SLURM_SUBMIT_DIR:-$HPCJOBS_RUN_DIR}" && env "${unset_vars[@]}" "${marks[@]}" \
        timeout 60 sbatch --parsable "--dependency=$dependency" "$@" "${hpcjobs_next_args[@]}" \
        "$0" 2>&1) || { echo "$new"; return 1; }
    new=${new%%;*}
    [[ $new =~ ^[0-9]+$ ]] || { echo "$new"; return 1; }
    [[ -n ${SLURM_ARRAY_TASK_ID:-} ]] && new="${new}_$SLURM_ARRAY_TASK_ID"
    echo "$new"
}

# The standby job a run of this job submitted, if the log names one ("standby job N for job M").
hpcjobs_standby_of() {
    local file
    file=$(hpcjobs_chain_file)
    [[ -f $file ]] || return 0
    awk -F'\t' -v me="$1" '$4 == "standby" && $6 ~ ("^standby job [0-9_]+ for job " me "$") {
        split($6, w, " "); id = w[3] } END { if (id != "") print id }' "$file"
}

# hpcjobs_standby_submit: give this run a standby (while the node failure budget lasts), and
# stop Slurm requeueing this job itself: with a standby, a dead node ends the job at once and
# releases its standby, instead of a requeue held for ~2 minutes.
# Not for array tasks (a standby per task would double a big array in the queue; a task's node
# failure goes through Slurm's requeue), nor for a job submitted --no-requeue (HPCJOBS_STANDBY=0).
hpcjobs_standby_submit() {
    local self old new used allowed
    [[ ${HPCJOBS_STANDBY:-1} == 1 && -z ${SLURM_ARRAY_TASK_ID:-} ]] || return 0
    self=$(hpcjobs_self_id)
    used=$(hpcjobs_count requeue node_failure)
    allowed=$(hpcjobs_budget node_failure)
    ((used < allowed)) || return 0
    # A run of this job that Slurm requeued anyway left a standby: it must never start too.
    old=$(hpcjobs_standby_of "$self")
    [[ -n $old ]] && scancel --quiet "$old" 2>/dev/null
    hpcjobs_being_cancelled && return 0
    if ! new=$(hpcjobs_submit_next "afternotok:$SLURM_JOB_ID" "$self" --kill-on-invalid-dep=yes); then
        hpcjobs_log "could not submit a standby job ($new); a node failure falls back to Slurm's requeue"
        return 0
    fi
    hpcjobs_event standby - "standby job $new for job $self"
    # A cancel that came while sbatch ran: the standby goes at once (afternotok counts a
    # cancelled job as failed, so it would start). The standby checks this too when it starts.
    if hpcjobs_being_cancelled; then
        scancel --quiet "$new" 2>/dev/null || hpcjobs_log "could not cancel the standby job $new"
        hpcjobs_log "job $SLURM_JOB_ID is being cancelled; its standby job $new is cancelled too"
        return 0
    fi
    hpcjobs_standby=$new
    if scontrol update "jobid=$SLURM_JOB_ID" Requeue=0 >/dev/null 2>&1; then
        hpcjobs_requeue_off=1
    else
        hpcjobs_log "could not mark job $SLURM_JOB_ID Requeue=0; after a node failure Slurm may requeue it too"
    fi
    return 0
}

# hpcjobs_being_cancelled: whether this job is being cancelled (scancel, hpcjobs cancel): Slurm
# says so (hpcjobs_was_cancelled), or a plain SIGTERM reached the script while Slurm shows
# neither a preemption nor a node failure (a preemption without the warning signal sends TERM).
hpcjobs_being_cancelled() {
    local info
    info=$(timeout 20 scontrol show job "$SLURM_JOB_ID" 2>/dev/null)
    hpcjobs_was_cancelled "$SLURM_JOB_ID" "$info" && return 0
    grep -qE 'PreemptTime=[0-9]|Reason=NodeDown|JobState=NODE_FAIL' <<<"$info" && return 1
    [[ ${hpcjobs_signal_seen:-} == term ]]
}

# hpcjobs_standby_cancel: the chain does not continue after this run: its standby goes.
hpcjobs_standby_cancel() {
    [[ -n ${hpcjobs_standby:-} ]] || return 0
    scancel --quiet "$hpcjobs_standby" 2>/dev/null ||
        hpcjobs_log "could not cancel the standby job $hpcjobs_standby"
    rmdir -- "$HPCJOBS_RUN_DIR/.takeover-$hpcjobs_standby" 2>/dev/null
    hpcjobs_standby=""
    return 0
}

# hpcjobs_claim_takeover STANDBY: whether this process is the one that logs how the run before
# STANDBY ended. That run (when its batch host lives on) and the standby (when it does not)
# may both try: one atomic mkdir decides.
hpcjobs_claim_takeover() {
    [[ ${hpcjobs_claimed:-} == "$1" ]] && return 0
    (umask 077 && mkdir -- "$HPCJOBS_RUN_DIR/.takeover-$1") 2>/dev/null || return 1
    hpcjobs_claimed=$1
}

# hpcjobs_standby_retarget: make the standby this run's continuation (it starts when this job
# ends, however it ends, on nodes without the excluded ones). Prints its id; fails when there
# is no standby or Slurm refuses the update.
hpcjobs_standby_retarget() {
    [[ -n ${hpcjobs_standby:-} ]] || return 1
    # Two updates: Slurm refuses the whole of one that holds a refused field. If the exclusion
    # comes too late, the standby hands over when it starts (hpcjobs_handoff_if_excluded).
    local excluded
    excluded=$(hpcjobs_excluded)
    [[ -n $excluded ]] && scontrol update "jobid=$hpcjobs_standby" "ExcNodeList=$excluded" >/dev/null 2>&1
    if ! scontrol update "jobid=$hpcjobs_standby" "Dependency=afterany:$SLURM_JOB_ID" >/dev/null 2>&1; then
        # Slurm may already have started it (this run died of a node failure).
        local state
        state=$(timeout 20 squeue -h -j "$hpcjobs_standby" -o %T 2>/dev/null | head -n 1)
        [[ -n $state && $state != PENDING ]] || return 1
    fi
    echo "$hpcjobs_standby"
}

# hpcjobs_hostnames HOSTLIST: one node name per line.
hpcjobs_hostnames() {
    [[ -n $1 && $1 != "(null)" ]] || return 0
    scontrol show hostnames "$1" 2>/dev/null
}

# hpcjobs_failed_nodes JOB NODELIST BATCHHOST: the nodes whose failure ended JOB. srun names
# them ("Node failure on n2") in the job's stderr when the batch host lived on; when nothing
# names one, the batch host died with the job. Nodes of JOB that Slurm now shows DOWN, DRAIN,
# FAIL or NOT_RESPONDING count too.
hpcjobs_failed_nodes() {
    local job=$1 nodes=$2 batch=$3 named="" node state
    if [[ -n ${hpcjobs_err_file:-} && -r $hpcjobs_err_file ]]; then
        named=$(tail -c 16777216 -- "$hpcjobs_err_file" 2>/dev/null |
            awk -v mark="hpcjobs[$job]: run " 'index($0, mark) { on = 1; next } on' |
            sed -n 's/^srun: error: Node failure on \([^ ]*\)$/\1/p')
        named=$(for node in $named; do hpcjobs_hostnames "$node"; done)
    fi
    [[ -z $named && -n $batch && $batch != "(null)" ]] && named=$batch
    {
        [[ -n $named ]] && printf '%s\n' "$named"
        while read -r node state; do
            [[ $state =~ (DOWN|DRAIN|FAIL|NOT_RESPONDING|\*) ]] && echo "$node"
        done < <(sinfo -h -N -n "$nodes" -o '%N %T' 2>/dev/null)
    } | awk 'NF && !seen[$0]++'
}

# hpcjobs_ended STATE: whether STATE is a job's final state (CANCELLED, NODE_FAIL, ...). An
# ending job shows COMPLETING in 'scontrol show job', whatever ended it.
hpcjobs_ended() {
    case ${1%% *} in
        "" | COMPLETING | RUNNING | PENDING | CONFIGURING | SUSPENDED | REQUEUE* | RESIZING | \
            SIGNALING | STAGE_OUT | STOPPED | RESV_DEL_HOLD) return 1 ;;
    esac
}

# hpcjobs_acct_state JOB: JOB's final state in accounting (its newest run), or nothing.
hpcjobs_acct_state() {
    local state
    state=$(timeout 10 sacct -n -X -P -j "$1" -o State 2>/dev/null | tail -n 1)
    echo "${state%% *}"
}

# hpcjobs_was_cancelled JOB [INFO]: whether JOB (INFO: its 'scontrol show job') was cancelled:
# CANCELLED there, or, while it still shows COMPLETING, in accounting, which records the final
# state when the job ends.
hpcjobs_was_cancelled() {
    local state
    state=$(hpcjobs_field "${2:-}" JobState)
    [[ $state == CANCELLED* ]] && return 0
    [[ $state == COMPLETING ]] || return 1
    [[ $(hpcjobs_acct_state "$1") == CANCELLED* ]]
}

# hpcjobs_final_state JOB [STATE]: how JOB ended (CANCELLED, NODE_FAIL, ...), STATE being what
# 'scontrol show job' said. Slurm releases an afternotok dependency as soon as the job has ended,
# while it may still show COMPLETING (a job cancelled at its start: its script is still running
# its trap); accounting records the final state at that moment. Asks both again, twice a
# second, for at most HPCJOBS_FINAL_STATE_WAIT seconds (60: KillWait and a margin); prints
# nothing if neither says by then.
hpcjobs_final_state() {
    local job=$1 state=${2:-} deadline=$((SECONDS + ${HPCJOBS_FINAL_STATE_WAIT:-60}))
    while :; do
        hpcjobs_ended "$state" && { echo "${state%% *}"; return 0; }
        state=$(hpcjobs_acct_state "$job")
        hpcjobs_ended "$state" && { echo "$state"; return 0; }
        ((SECONDS < deadline)) || return 0
        sleep 0.5
        state=$(hpcjobs_field "$(timeout 10 scontrol show job "$job" 2>/dev/null)" JobState)
    done
}

# hpcjobs_after_standby_release: this job is a standby and Slurm released it. When the run it
# stood by for retargeted it, it is an ordinary continuation. Otherwise that run died without a
# word: record why (from Slurm), exclude the failed nodes, and enforce the budget. Exits when
# the chain must not go on.
hpcjobs_after_standby_release() {
    local pred=$HPCJOBS_STANDBY_FOR self info state end nodes batch cause failed when
    self=$(hpcjobs_self_id)
    if ! hpcjobs_claim_takeover "$self"; then
        # The run it stood by for is logging how it ended right now: wait for that.
        local i
        for ((i = 0; i < 60; i++)); do
            grep -q "continued as job $self\( \|\$\)" "$(hpcjobs_chain_file)" 2>/dev/null && break
            sleep 0.25
        done
    fi
    if grep -q "continued as job $self\( \|\$\)" "$(hpcjobs_chain_file)" 2>/dev/null; then
        return 0
    fi
    if awk -F'\t' -v me="standby job $self for job" '
        index($6, me) == 1 { on = 1; next } on && $4 == "end" { found = 1 } END { exit !found }' \
        "$(hpcjobs_chain_file)" 2>/dev/null; then
        hpcjobs_log "the chain ended with job $pred; its standby does not run"
        exit 0
    fi
    info=$(timeout 20 scontrol show job "$pred" 2>/dev/null)
    state=$(hpcjobs_field "$info" JobState)
    end=$(hpcjobs_field "$info" EndTime)
    nodes=$(hpcjobs_field "$info" NodeList)
    batch=$(hpcjobs_field "$info" BatchHost)
    if [[ -z $state ]]; then
        # The controller has forgotten it (MinJobAge): accounting knows how and where it ran.
        IFS='|' read -r state end nodes < <(timeout 20 sacct -n -X -P -j "$pred" \
            -o State,End,NodeList 2>/dev/null | tail -n 1)
        state=${state%% *}
    fi
    state=$(hpcjobs_final_state "$pred" "$state")
    case $state in
        NODE_FAIL | BOOT_FAIL) cause=node_failure ;;
        PREEMPTED) cause=preemption ;;
        TIMEOUT | DEADLINE) cause=timeout ;;
        CANCELLED*)
            hpcjobs_event end fail "cancelled: job $pred was cancelled"
            hpcjobs_log "job $pred was cancelled; its standby does not run"
            exit 0
            ;;
        *) cause=infrastructure ;;
    esac
    when=""
    [[ -n $end && $end != Unknown && $end != None ]] && when=$(date -d "$end" +%s 2>/dev/null)
    if [[ $cause == node_failure || $cause == infrastructure ]]; then
        failed=$(hpcjobs_failed_nodes "$pred" "$nodes" "$batch" | paste -sd, -)
        hpcjobs_event fault "$cause" \
            "node=${failed:--} job=$pred evidence=job $pred ended ${state:-?} without a word (batch host ${batch:-?})" "$when"
        [[ -n $failed ]] && hpcjobs_exclude "$cause" "${failed//,/ }"
    fi
    hpcjobs_event requeue "$cause" \
        "standby job $self took over from job $pred (${state:-?}) $(hpcjobs_position)" "$when"
    hpcjobs_log "$cause: job $pred ended ${state:-?}${failed:+ (failed: $failed)}; standby job $self takes over"
    hpcjobs_enforce_budget "$cause"
}

# hpcjobs_handoff_if_excluded: this job landed on a node the chain excludes (a failed node can
# come back before its standby starts, or the exclusion reached the standby too late): hand
# over to a new job without it, and exit.
hpcjobs_handoff_if_excluded() {
    local mine bad="" node new excluded
    excluded=$(hpcjobs_excluded)
    [[ -n $excluded ]] || return 0
    mine=$(hpcjobs_hostnames "${SLURM_JOB_NODELIST:-}")
    for node in ${mine}; do
        [[ ,$excluded, == *",$node,"* ]] && bad=${bad:+$bad,}$node
    done
    [[ -n $bad ]] || return 0
    if ! new=$(hpcjobs_submit_next "afterany:$SLURM_JOB_ID" ""); then
        hpcjobs_log "could not hand over to a job without $bad ($new); running here"
        return 0
    fi
    hpcjobs_event handoff - "continued as job $new: this job's nodes include excluded $bad"
    hpcjobs_log "this job got excluded node(s) $bad; continuing as job $new"
    exit 0
}

# hpcjobs_enforce_budget CAUSE: after logging a requeue for CAUSE at the start of a run, end
# the chain when the budget for CAUSE or the total budget is used up.
hpcjobs_enforce_budget() {
    local cause=$1 used allowed total
    used=$(hpcjobs_count requeue "$cause")
    allowed=$(hpcjobs_budget "$cause")
    total=$(hpcjobs_count requeue)
    if ((used > allowed)); then
        hpcjobs_event end fail "requeue budget for $cause exhausted: $((used - 1))/$allowed"
        hpcjobs_log "requeue budget for $cause exhausted ($((used - 1))/$allowed); giving up"
        hpcjobs_chain_ends
        exit 1
    fi
    if [[ -n ${HPCJOBS_MAX_REQUEUES:-} ]] && ((total > HPCJOBS_MAX_REQUEUES)); then
        hpcjobs_event end fail "requeue budget exhausted: $((total - 1))/$HPCJOBS_MAX_REQUEUES requeues in total"
        hpcjobs_log "total requeue budget exhausted ($((total - 1))/$HPCJOBS_MAX_REQUEUES); giving up"
        hpcjobs_chain_ends
        exit 1
    fi
}

# ---- exclusions -----------------------------------------------------------------------------

# The nodes the chain excludes from now on, comma-separated (each 'exclude' event holds the
# whole list).
hpcjobs_excluded() {
    local file
    file=$(hpcjobs_chain_file)
    [[ -f $file ]] || return 0
    awk -F'\t' '$4 == "exclude" { list = $6 } END {
        sub(/^nodes=/, "", list); sub(/ .*/, "", list); if (list != "-") print list }' "$file"
}

# hpcjobs_partition_nodes: how many nodes this job's partition has (empty when unknown).
hpcjobs_partition_nodes() {
    local part=${SLURM_JOB_PARTITION%%,*}
    [[ -n $part ]] || return 0
    hpcjobs_field "$(timeout 20 scontrol show partition "$part" -o 2>/dev/null)" TotalNodes
}

# hpcjobs_exclude CAUSE NODE...: exclude NODEs from every later run of the chain. At most
# HPCJOBS_MAX_EXCLUDED nodes, and never so many that the partition could not hold the job:
# the oldest exclusions are lifted first (the chain then waits for capacity, not fails).
hpcjobs_exclude() {
    local cause=$1 list=() kept=() node max total room dropped=() detail
    shift
    IFS=, read -r -a list <<<"$(hpcjobs_excluded)"
    for node in "$@"; do
        [[ -n $node ]] || continue
        kept=()
        for n in "${list[@]}"; do [[ $n != "$node" && -n $n ]] && kept+=("$n"); done
        list=("${kept[@]}" "$node")
    done
    max=${HPCJOBS_MAX_EXCLUDED:-8}
    total=$(hpcjobs_partition_nodes)
    if [[ $total =~ ^[0-9]+$ ]]; then
        room=$((total - ${SLURM_JOB_NUM_NODES:-1}))
        ((room < max)) && max=$room
    fi
    ((max < 0)) && max=0
    while ((${#list[@]} > max)); do
        dropped+=("${list[0]}")
        list=("${list[@]:1}")
    done
    detail="nodes=$(IFS=,; echo "${list[*]:--}")"
    if ((${#dropped[@]})); then
        detail+=" released=$(IFS=,; echo "${dropped[*]}") (at most $max excluded)"
    fi
    hpcjobs_event exclude "$cause" "$detail"
    hpcjobs_log "excluding $(IFS=,; echo "${list[*]:-no node}") from later runs${dropped:+; no longer excluding ${dropped[*]}}"
}

# hpcjobs_healthy NODE: whether the site's health check passes on NODE (run in this job's
# allocation, before NODE is excluded). Fails when there is no health check.
hpcjobs_healthy() {
    local node=$1 out rc
    [[ -n ${HPCJOBS_HEALTH_CHECK:-} ]] || return 1
    out=$(timeout "${HPCJOBS_HEALTH_TIMEOUT:-60}" srun --overlap --nodes=1 --ntasks=1 \
        --nodelist="$node" --job-name=hpcjobs-health-check --quiet \
        bash -c "$HPCJOBS_HEALTH_CHECK" 2>&1)
    rc=$?
    out=$(tail -n 1 <<<"$out" | cut -c 1-200)
    if ((rc == 0)); then
        hpcjobs_event health pass "node=$node ${out}"
        hpcjobs_log "health check passed on $node; it is not excluded"
        return 0
    fi
    hpcjobs_event health fail "node=$node exit=$rc ${out}"
    hpcjobs_log "health check failed on $node (exit code $rc)"
    return 1
}

# ---- crashes --------------------------------------------------------------------------------

# hpcjobs_run_stderr: this run's part of the job's stderr (at most 16 MiB).
hpcjobs_run_stderr() {
    [[ -n ${hpcjobs_err_file:-} && -r $hpcjobs_err_file ]] || return 0
    tail -c +$((${hpcjobs_err_offset:-0} + 1)) -- "$hpcjobs_err_file" 2>/dev/null | head -c 16777216
}

# hpcjobs_node_failure_lines: srun's "Node failure on NODE" lines of this run.
hpcjobs_node_failure_lines() {
    hpcjobs_run_stderr | grep -a '^srun: error: Node failure on ' 2>/dev/null
    return 0
}

# hpcjobs_first_failure: "NODE<TAB>TASKS<TAB>WHAT" for the first task srun reported failed in
# this run ("srun: error: n2: task 1: Exited with exit code 1"), from the job's stderr since
# the run began; nothing when srun reported none.
hpcjobs_first_failure() {
    hpcjobs_run_stderr | sed -n -E 's/^srun: error: ([^ :]+): tasks? ([0-9,-]+): (.*)$/\1\t\2\t\3/p' | head -n 1
}

# hpcjobs_signature FILE...: the first line of the FILEs that matches an infrastructure
# signature (HPCJOBS_INFRA_PATTERNS), cut to 300 characters.
hpcjobs_signature() {
    local args=() pattern
    ((${#HPCJOBS_INFRA_PATTERNS[@]} && $#)) || return 0
    for pattern in "${HPCJOBS_INFRA_PATTERNS[@]}"; do args+=(-e "$pattern"); done
    grep -h -a -m 1 -E "${args[@]}" -- "$@" 2>/dev/null | head -n 1 | tr -d '\r' | cut -c 1-300
}

# hpcjobs_crash: after a non-zero exit that no signal explains, prints
# "CAUSE<TAB>SUSPECT<TAB>EVIDENCE": 'infrastructure' when the first failing task's output
# shows an infrastructure signature, or the task died of SIGBUS or SIGKILL; else
# 'application' (and no suspect). An empty field is "-" (read would merge two tabs).
hpcjobs_crash() {
    local first node tasks what dir files=() f evidence
    first=$(hpcjobs_first_failure)
    IFS=$'\t' read -r node tasks what <<<"$first"
    if [[ -z $node ]]; then
        printf 'application\t-\t-\n'
        return
    fi
    dir=$(hpcjobs_capture_dir)
    # The failing task's own copy first (with srun, a task is a rank), then the node's others.
    for f in "$dir/$node.rank-${tasks%%[,-]*}" "$dir/$node".rank-*; do
        [[ -f $f ]] && files+=("$f")
    done
    evidence=$(hpcjobs_signature "${files[@]}")
    if [[ -n $evidence ]]; then
        printf 'infrastructure\t%s\t%s\n' "$node" "$evidence"
        return
    fi
    case $what in
        "Bus error"* | Killed*)
            printf 'infrastructure\t%s\tsrun: %s: task %s: %s\n' "$node" "$node" "$tasks" "$what"
            return
            ;;
    esac
    printf 'application\t-\tsrun: %s: task %s: %s\n' "$node" "$tasks" "$what"
}

# ---- stalls ---------------------------------------------------------------------------------

# Where the stall watcher leaves what it found for hpcjobs_finish.
hpcjobs_stall_file() {
    printf '%s/.stall-%s' "$HPCJOBS_PROGRESS_DIR" "$(hpcjobs_self_id)"
}

# hpcjobs_stall_watch: while the launcher (hpcjobs_child) runs, read every rank's progress
# report once a second. A rank that reported during this run and whose step has not changed
# for HPCJOBS_STALL_TIMEOUT s is stalled: the rank with the lowest step (the oldest report
# among equals) is the suspect, unless another rank is tied with it (same step, reported
# within 2 s). Then the ranks get the warning signal, HPCJOBS_STALL_GRACE s to checkpoint, and
# the job's steps are killed. Ranks that never report are never judged.
hpcjobs_stall_watch() {
    local timeout=${HPCJOBS_STALL_TIMEOUT:-0}
    [[ $timeout =~ ^[0-9]+$ ]] && ((timeout > 0)) || return 0
    [[ -n ${hpcjobs_child:-} && -n ${hpcjobs_run_mark:-} ]] || return 0
    (
        trap - TERM INT HUP USR1 USR2
        local -A step_of seen node_of
        local f r s n now oldest tied idle node grace=${HPCJOBS_STALL_GRACE:-10} i
        while sleep 1; do
            kill -0 "$hpcjobs_child" 2>/dev/null || exit 0
            now=$SECONDS
            for f in "$HPCJOBS_PROGRESS_DIR"/rank-*; do
                r=${f##*/rank-}
                [[ $r =~ ^[0-9]+$ && $f -nt $hpcjobs_run_mark ]] || continue
                s="" n=""
                read -r s n <"$f" 2>/dev/null
                [[ $s =~ ^[0-9]+$ ]] || continue
                if [[ ${step_of[$r]:-} != "$s" ]]; then
                    step_of[$r]=$s seen[$r]=$now node_of[$r]=$n
                fi
            done
            oldest=""
            for r in "${!seen[@]}"; do
                if [[ -z $oldest ]] || ((step_of[$r] < step_of[$oldest] ||
                    (step_of[$r] == step_of[$oldest] && seen[$r] < seen[$oldest]))); then
                    oldest=$r
                fi
            done
            [[ -n $oldest ]] || continue
            ((now - seen[$oldest] > timeout)) || continue
            tied=0
            for r in "${!seen[@]}"; do
                ((r != oldest && step_of[$r] == step_of[$oldest] &&
                    seen[$r] - seen[$oldest] <= 2)) && tied=$((tied + 1))
            done
            idle=$((now - seen[$oldest]))
            node=${node_of[$oldest]:-}
            # A report without its node: the rank's output copy names where hpcjobs started it.
            if [[ -z $node && -n ${HPCJOBS_CAPTURE_DIR:-} ]]; then
                for f in "$HPCJOBS_CAPTURE_DIR"/*.rank-"$oldest"; do
                    [[ -e $f ]] && { node=${f##*/}; node=${node%.rank-"$oldest"}; }
                done
            fi
            ((tied)) && node=""
            (umask 077 && printf '%s\t%s\t%s\t%s\t%s\n' "${node:--}" "$oldest" \
                "${step_of[$oldest]}" "$idle" "$tied" >"$(hpcjobs_stall_file)")
            if ((tied)); then
                hpcjobs_log "stall: rank $oldest and $tied other rank(s) have been at step ${step_of[$oldest]} for ${idle} s (tied: no node is blamed); sending SIG${HPCJOBS_SIGNAL:-USR2}, ending the step in ${grace} s"
            else
                hpcjobs_log "stall: rank $oldest has been at step ${step_of[$oldest]} for ${idle} s${node:+ (node $node)}; sending SIG${HPCJOBS_SIGNAL:-USR2}, ending the step in ${grace} s"
            fi
            kill -s "${HPCJOBS_SIGNAL:-USR2}" "$hpcjobs_child" 2>/dev/null
            for ((i = 0; i < grace * 5; i++)); do
                kill -0 "$hpcjobs_child" 2>/dev/null || exit 0
                sleep 0.2
            done
            hpcjobs_kill_steps
            sleep 3
            kill -s KILL "$hpcjobs_child" 2>/dev/null
            exit 0
        done
    ) &
    hpcjobs_stall_pid=$!
}

# hpcjobs_kill_steps: SIGKILL to every job step of this job but the batch step and hpcjobs'
# own monitors (the launcher's step, and any the program started).
hpcjobs_kill_steps() {
    local id name
    while read -r id name; do
        [[ $id =~ ^[0-9_]+\.[0-9]+$ && $name != hpcjobs-gpu-monitor ]] || continue
        scancel --quiet --signal=KILL "$id" 2>/dev/null
    done < <(timeout 20 squeue -h -s -j "$SLURM_JOB_ID" -o '%i %j' 2>/dev/null)
    return 0
}

# hpcjobs_stall_stop: end the watcher (hpcjobs_finish calls it first).
hpcjobs_stall_stop() {
    [[ -n ${hpcjobs_stall_pid:-} ]] && kill "$hpcjobs_stall_pid" 2>/dev/null
    return 0
}

# hpcjobs_stalled: prints "SUSPECT<TAB>RANK<TAB>STEP<TAB>IDLE<TAB>TIED" when the watcher ended
# this run for a stall.
hpcjobs_stalled() {
    local file
    file=$(hpcjobs_stall_file)
    [[ -f $file ]] && head -n 1 "$file"
    return 0
}

# hpcjobs_fault_log CAUSE SUSPECT EVIDENCE: log a fault that ended this run.
hpcjobs_fault_log() {
    local cause=$1 suspect=$2 evidence=$3
    hpcjobs_event fault "$cause" "node=${suspect:--} evidence=$evidence"
    hpcjobs_log "$cause${suspect:+ on node $suspect}: $evidence"
}

# hpcjobs_fault_exclude CAUSE SUSPECT: exclude the suspect from later runs, unless the site's
# health check clears it.
hpcjobs_fault_exclude() {
    local cause=$1 suspect=$2
    [[ -n $suspect && $suspect != - ]] || return 0
    hpcjobs_healthy "$suspect" && return 0
    hpcjobs_exclude "$cause" "$suspect"
}
# ---- end of hpcjobs fault library ------------------------------------------------------------
# 
hpcjobs_begin

# --- launch: srun ---
# Rendezvous on the first node's address (NodeAddr, which resolves even where node names do
# not), on a port derived from the job id so that jobs sharing a node do not collide. Exported
# for every launcher: hpcjobs.runtime.distributed reads them and asks Slurm nothing.
hpcjobs_head=$(scontrol show hostnames "${SLURM_JOB_NODELIST:-localhost}" | head -n 1)
MASTER_ADDR=$(scontrol show node "$hpcjobs_head" 2>/dev/null | tr ' ' '\n' | sed -n 's/^NodeAddr=//p' | head -n 1)
export MASTER_ADDR="${MASTER_ADDR:-$hpcjobs_head}"
export MASTER_PORT=$(( 20000 + SLURM_JOB_ID % 10000 ))
# One task per rank; each becomes the command through hpcjobs_rank.
# shellcheck disable=SC2016
srun --nodes=16 --ntasks-per-node=8 --cpus-per-task=28 --kill-on-bad-exit=1 \
  bash -c 'hpcjobs_rank "$@"' hpcjobs-rank \
  python -m trainer.main --config 'configs/large model.yaml' --lr 3e-4 &
hpcjobs_child=$!
hpcjobs_stall_watch
hpcjobs_wait

# --- requeue: decide whether this run comes back ---
# Policy: signal TERM 600 s before the limit; Slurm requeue on; budgets: preemption=20 timeout=10 node_failure=5 infrastructure=3 stall=3 application=0.

# Finished, failed, or continued from the last checkpoint: hpcjobs_finish decides from the
# cause (preemption, timeout, node failure) and the budget, not from the exit code.
exit "$(hpcjobs_finish "$hpcjobs_status" "$hpcjobs_signal_seen")"
# --- dry run: nothing was submitted; hpcjobs would run (SUBMITDIR: <output dir>/submit-<time>-<token>) ---
# sbatch --parsable --job-name=pretrain-large --partition=batch --nodes=16 --ntasks-per-node=8 --cpus-per-task=28 --gpus-per-node=h100:8 --time=12:00:00 --output=/home/user/hpcjobs/runs/pretrain-large/slurm-%j.out --open-mode=append --signal=B:TERM@600 --requeue --exclusive --mem=0 --dependency=afterok:4242 '--comment=hpcjobs:<token>' SUBMITDIR/job.sh
