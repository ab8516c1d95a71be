# {% raw %}# ---- hpcjobs requeue library (bash; needs scontrol, squeue, sbatch; sacct if present) ------
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
# {% endraw +%}
