# {% raw %}# ---- hpcjobs fault library (bash; needs scontrol, squeue, sbatch, scancel, srun) ------------
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
# {% endraw +%}
