#!/bin/bash
# shellcheck disable=SC2317,SC2329,SC1091  # functions run in the ranks (through bash -c); site files are sourced
#SBATCH --job-name=torchrun-small
#SBATCH --partition=finetune
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=128
#SBATCH --gpus-per-node=a100:4
#SBATCH --time=00:45:00
#SBATCH --output=/home/user/hpcjobs/runs/torchrun-small/slurm-%j.out
#SBATCH --open-mode=append
#SBATCH --signal=B:USR2@180
#SBATCH --requeue
#
# Job script rendered by hpcjobs for site a100-roce, partition finetune.
# hpcjobs submits it with these options (they override the #SBATCH lines above):
#   sbatch --job-name=torchrun-small --partition=finetune --nodes=2 --ntasks-per-node=1 --cpus-per-task=128 --gpus-per-node=a100:4 --time=00:45:00 --output=/home/user/hpcjobs/runs/torchrun-small/slurm-%j.out --open-mode=append --signal=B:USR2@180 --requeue SCRIPT

# --- environment: modules, site setup, job variables ---
set -eo pipefail
module load cuda/12.2
export HPCJOBS_RUN_DIR=/home/user/hpcjobs/runs/torchrun-small
export HPCJOBS_CHECKPOINT_DIR=/home/user/hpcjobs/runs/torchrun-small/checkpoints
export HPCJOBS_SIGNAL=USR2
export HPCJOBS_GPU_MONITOR_INTERVAL=30
export HPCJOBS_GPU_QUERY=timestamp,index,uuid,utilization.gpu,memory.used,memory.total
export HPCJOBS_RUN_FINGERPRINT=beec905e414ca06b0b86
export HPCJOBS_RUN_FILE=/home/user/hpcjobs/runs/torchrun-small/checkpoints/RUN
export PYTHONUNBUFFERED=1  # hpcjobs: logs reach the output file as they are written

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

# --- binding: rank variables and per-rank placement on topology a100-roce ---
# Planned placement when the job gets the node's GPUs in order:
#   local rank 0: GPU 0 | CPUs 0-15,64-79 | memory node 0 | NIC mlx5_0:1
#   local rank 1: GPU 1 | CPUs 16-31,80-95 | memory node 0 | NIC mlx5_0:1
#   local rank 2: GPU 2 | CPUs 32-47,96-111 | memory node 1 | NIC mlx5_1:1
#   local rank 3: GPU 3 | CPUs 48-63,112-127 | memory node 1 | NIC mlx5_1:1
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
  trap '' USR2  # the program starts with SIGUSR2 ignored until it installs a handler
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
      0) c=0-15,64-79 m=0 n=mlx5_0:1 ;;
      1) c=16-31,80-95 m=0 n=mlx5_0:1 ;;
      2) c=32-47,96-111 m=1 n=mlx5_1:1 ;;
      3) c=48-63,112-127 m=1 n=mlx5_1:1 ;;
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

# --- signal: forward SIGUSR2 and SIGTERM to the launcher, wait until it really exits ---
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
  if [ "$1" = TERM ] && [ "$1" != USR2 ]; then
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
trap 'hpcjobs_forward USR2' USR2
trap 'hpcjobs_forward TERM' TERM
hpcjobs_start() {
  # Become "$@" with the warning signal ignored: Slurm signals every process of a step, so
  # launchers (torchrun) must not die of it, and a program opts in by installing a handler.
  trap '' USR2
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
HPCJOBS_SIGNAL_LEAD=180
HPCJOBS_MAX_REQUEUE_PREEMPTION=50
HPCJOBS_MAX_REQUEUE_TIMEOUT=10
HPCJOBS_MAX_REQUEUE_NODE_FAILURE=5
HPCJOBS_MAX_REQUEUE_APPLICATION=0
HPCJOBS_MAX_REQUEUES=''
# The options its continuation job is submitted with (no options for the first submission only).
HPCJOBS_SBATCH_ARGS=(--job-name=torchrun-small --partition=finetune --nodes=2 --ntasks-per-node=1 --cpus-per-task=128 --gpus-per-node=a100:4 --time=00:45:00 --output=/home/user/hpcjobs/runs/torchrun-small/slurm-%j.out --open-mode=append --signal=B:USR2@180 --requeue)
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
#         HPCJOBS_MAX_REQUEUE_{PREEMPTION,TIMEOUT,NODE_FAILURE,APPLICATION}, HPCJOBS_MAX_REQUEUES
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
    case $1 in
        preemption) echo "${HPCJOBS_MAX_REQUEUE_PREEMPTION:-0}" ;;
        timeout) echo "${HPCJOBS_MAX_REQUEUE_TIMEOUT:-0}" ;;
        node_failure) echo "${HPCJOBS_MAX_REQUEUE_NODE_FAILURE:-0}" ;;
        application) echo "${HPCJOBS_MAX_REQUEUE_APPLICATION:-0}" ;;
        *) echo 0 ;;
    esac
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
        owner=$(sed -n 's/.*"fingerprint": *"\([0-9a-f]*\)".*/\1/p' "$HPCJOBS_RUN_FILE" 2>/dev/null)
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
hpcjobs_private_logs() {
    local info path
    info=$(timeout 20 scontrol show job "$SLURM_JOB_ID" 2>/dev/null) || return 0
    # Each of StdOut= and StdErr= has a line of its own; a job name cannot fake one.
    while read -r path; do
        [[ -f $path && -O $path ]] && chmod go-rwx -- "$path" 2>/dev/null
    done < <(sed -n 's/^[[:space:]]\{1,\}Std\(Out\|Err\)=//p' <<<"$info")
    return 0
}

hpcjobs_begin() {
    (umask 077 && mkdir -p -- "$HPCJOBS_RUN_DIR")
    hpcjobs_private_logs
    # A continuation carries its chain's root; anything else starts a chain of its own.
    local self
    self=$(hpcjobs_self_id)
    if [[ -n ${HPCJOBS_CHAIN_ROOT:-} ]] &&
        ! grep -q "continued as job ${SLURM_ARRAY_JOB_ID:-${SLURM_JOB_ID:-x}}\( \|\$\|_\)" "$(hpcjobs_chain_file)" 2>/dev/null; then
        HPCJOBS_CHAIN_ROOT=$self
    fi
    export HPCJOBS_CHAIN_ROOT=${HPCJOBS_CHAIN_ROOT:-$self}
    if [[ $HPCJOBS_CHAIN_ROOT == "$self" ]] && ((${SLURM_RESTART_COUNT:-0} == 0)); then
        hpcjobs_set_aside_stale
    fi
    # Per-rank progress reports (hpcjobs.runtime.progress), next to the event log: one folder per chain.
    export HPCJOBS_PROGRESS_DIR=$HPCJOBS_RUN_DIR/progress-$HPCJOBS_CHAIN_ROOT
    (umask 077 && mkdir -p -- "$HPCJOBS_PROGRESS_DIR") 2>/dev/null || true
    hpcjobs_check_checkpoint_dir
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
    local step
    step=$(hpcjobs_latest_step)
    hpcjobs_gpu_monitor # from here on every run ends in hpcjobs_finish, which stops it
    hpcjobs_event start - "checkpoint=$step"
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
    local file last event cause detail self next run when used allowed total
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

# hpcjobs_cause RC SIGNAL: preemption | timeout | cancelled | none | application, or
# requeued_preemption | requeued_node_failure when Slurm has already requeued the job itself.
hpcjobs_cause() {
    local rc=$1 signal=$2 left info restarts
    info=$(scontrol show job "$SLURM_JOB_ID" 2>/dev/null)
    # Slurm counts a requeue as soon as it decides it (node failure, preemption grace time over,
    # an admin's requeue): the job comes back with the same id, so no continuation is needed,
    # and the program's exit (0 after a checkpoint) must not mark the job done.
    restarts=$(grep -oE '(^|[[:space:]])Restarts=[0-9]+' <<<"$info" | head -n 1)
    restarts=${restarts##*=}
    if [[ -n $restarts ]] && ((restarts > ${SLURM_RESTART_COUNT:-0})); then
        echo "requeued_$(hpcjobs_requeue_cause "$(hpcjobs_run_state $((${SLURM_RESTART_COUNT:-0} + 1)))" "$signal")"
        return
    fi
    if grep -qE 'PreemptTime=[0-9]' <<<"$info"; then
        echo preemption
        return
    fi
    # scancel: steps get SIGTERM, so the program may exit cleanly before the shell hears of it.
    if grep -q 'JobState=CANCELLED' <<<"$info"; then
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
    if ! scontrol update "jobid=$SLURM_JOB_ID" Requeue=0 >/dev/null 2>&1; then
        hpcjobs_log "could not mark job $SLURM_JOB_ID Requeue=0; Slurm may also requeue it"
    fi
}

# hpcjobs_chain_ends: the chain ends with this run (finished, failed, or it goes on elsewhere).
# Slurm 24.11 requeues the run that follows its own requeue of a preempted job once more when
# that run exits, whatever its exit code (accounting records it PREEMPTED): the job would come
# back after Slurm's ~2 minute hold only to find the chain ended. Runs Slurm never requeued
# (SLURM_RESTART_COUNT=0) are left alone: they need no extra call to the controller.
hpcjobs_chain_ends() {
    if ((${SLURM_RESTART_COUNT:-0} > 0)); then
        hpcjobs_no_slurm_requeue
    fi
    return 0
}

# hpcjobs_continue CAUSE: submit the continuation job and stop Slurm requeueing this one.
# The continuation gets this job's options (HPCJOBS_SBATCH_ARGS: the renderer has left out the
# ones for the first submission only, hpcjobs.script.sbatchopts.FIRST_SUBMISSION_ONLY) except the array
# and dependency, which it sets itself, and this job's comment, which carries the chain's token.
hpcjobs_continue() {
    local args=() arg new skip=0 comment root=${HPCJOBS_CHAIN_ROOT:-$(hpcjobs_self_id)}
    for arg in "${HPCJOBS_SBATCH_ARGS[@]}"; do
        if ((skip)); then skip=0; continue; fi
        case $arg in
            --array=* | --dependency=* | --comment=*) continue ;;
            -a | -d | --array | --dependency | --comment) skip=1; continue ;;
            -a* | -d*) continue ;;
            --output=* | --error=*)
                # Every run of the chain appends to the first run's log file.
                arg=${arg//%j/$root}
                arg=${arg//%A/${root%%_*}}
                ;;
        esac
        args+=("$arg")
    done
    [[ -n ${SLURM_ARRAY_TASK_ID:-} ]] && args+=("--array=$SLURM_ARRAY_TASK_ID")
    comment=$(timeout 20 squeue -h -j "$SLURM_JOB_ID" -o %k 2>/dev/null | head -n 1)
    [[ -n $comment && $comment != "(null)" ]] && args+=("--comment=$comment")
    # A clean environment: the new job must not inherit this job's SLURM_* settings.
    local unset_vars=() name
    for name in $(compgen -e); do
        [[ $name =~ ^(SLURM|SBATCH|SALLOC|SRUN)_ && $name != SLURM_CONF ]] && unset_vars+=(-u "$name")
    done
    if new=$(cd "${SLURM_SUBMIT_DIR:-$HPCJOBS_RUN_DIR}" && env "${unset_vars[@]}" \
        HPCJOBS_CHAIN_ROOT="$root" sbatch --parsable \
        "--dependency=afterany:$SLURM_JOB_ID" "${args[@]}" "$0" 2>&1); then
        new=${new%%;*}
        [[ -n ${SLURM_ARRAY_TASK_ID:-} ]] && new="${new}_$SLURM_ARRAY_TASK_ID"
        hpcjobs_no_slurm_requeue
        hpcjobs_event requeue "$1" "continued as job $new $(hpcjobs_position)"
        hpcjobs_log "$1: continuing as job $new (starts when resources are free)"
        return 0
    fi
    hpcjobs_log "could not submit the continuation ($new); falling back to Slurm's requeue"
    hpcjobs_event requeue "$1" "requeued by Slurm (fallback) $(hpcjobs_position)"
    scontrol requeue "$SLURM_JOB_ID" >/dev/null 2>&1 || hpcjobs_log "scontrol requeue failed too"
    return 0
}

# hpcjobs_finish RC SIGNAL: decide and act after the workload exited. Prints the job's exit code.
hpcjobs_finish() {
    local rc=$1 signal=$2 cause used allowed total
    hpcjobs_gpu_monitor_stop
    if hpcjobs_is_done; then
        hpcjobs_event end finish "done marker present"
        hpcjobs_chain_ends
        echo 0
        return
    fi
    cause=$(hpcjobs_cause "$rc" "$signal")
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
            echo $((rc ? rc : 143))
            return
            ;;
    esac
    used=$(hpcjobs_count requeue "$cause")
    allowed=$(hpcjobs_budget "$cause")
    total=$(hpcjobs_count requeue)
    if [[ -n ${HPCJOBS_MAX_REQUEUES:-} ]] && ((total >= HPCJOBS_MAX_REQUEUES)); then
        hpcjobs_event end fail "requeue budget exhausted: $total/$HPCJOBS_MAX_REQUEUES requeues in total"
        if [[ $cause == preemption ]]; then hpcjobs_no_slurm_requeue; else hpcjobs_chain_ends; fi
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
        if [[ $cause == preemption ]]; then hpcjobs_no_slurm_requeue; else hpcjobs_chain_ends; fi
        hpcjobs_log "$cause (exit code $rc); not requeued ($used/$allowed requeues used)"
        echo $((rc ? rc : 1))
        return
    fi
    hpcjobs_continue "$cause" >&2
    echo 0
}
# ---- end of hpcjobs requeue library ----------------------------------------------------------
# 
hpcjobs_begin

# --- launch: torchrun ---
# Rendezvous on the first node's address (NodeAddr, which resolves even where node names do
# not), on a port derived from the job id so that jobs sharing a node do not collide.
hpcjobs_head=$(scontrol show hostnames "${SLURM_JOB_NODELIST:-localhost}" | head -n 1)
MASTER_ADDR=$(scontrol show node "$hpcjobs_head" 2>/dev/null | tr ' ' '\n' | sed -n 's/^NodeAddr=//p' | head -n 1)
export MASTER_ADDR="${MASTER_ADDR:-$hpcjobs_head}"
export MASTER_PORT=$(( 20000 + SLURM_JOB_ID % 10000 ))
# One torchrun per node (c10d rendezvous, id = job id); each worker becomes the command through
# hpcjobs_rank, which reads torchrun's LOCAL_RANK.
# shellcheck disable=SC2016
srun --nodes=2 --ntasks-per-node=1 --cpus-per-task=128 --kill-on-bad-exit=1 \
  bash -c 'hpcjobs_start "$@"' hpcjobs-node \
  torchrun --nnodes=2 --nproc-per-node=4 \
  --rdzv-backend=c10d --rdzv-endpoint="$MASTER_ADDR:$MASTER_PORT" --rdzv-id="${SLURM_JOB_ID:-0}" \
  --max-restarts=0 --no-python \
  bash -c 'hpcjobs_rank "$@"' hpcjobs-rank \
  python train.py --model 'tiny; echo not-a-command' &
hpcjobs_child=$!
hpcjobs_wait

# --- requeue: decide whether this run comes back ---
# Policy: signal USR2 180 s before the limit; Slurm requeue on; budgets: preemption=50 timeout=10 node_failure=5 application=0.

# Finished, failed, or continued from the last checkpoint: hpcjobs_finish decides from the
# cause (preemption, timeout, node failure) and the budget, not from the exit code.
exit "$(hpcjobs_finish "$hpcjobs_status" "$hpcjobs_signal_seen")"
# --- dry run: nothing was submitted; hpcjobs would run (SUBMITDIR: <output dir>/submit-<time>-<token>) ---
# sbatch --parsable --job-name=torchrun-small --partition=finetune --nodes=2 --ntasks-per-node=1 --cpus-per-task=128 --gpus-per-node=a100:4 --time=00:45:00 --output=/home/user/hpcjobs/runs/torchrun-small/slurm-%j.out --open-mode=append --signal=B:USR2@180 --requeue '--comment=hpcjobs:<token>' SUBMITDIR/job.sh
