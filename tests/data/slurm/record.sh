#!/usr/bin/env bash
# Record the Slurm client output the parsers are tested on, from a running cluster.
#
# Usage: SLURM_CONF=/path/to/slurm.conf tests/data/slurm/record.sh OUTDIR
#
# Meant for a throw-away cluster such as 'hpcjobs sandbox up' (nodes n1-n3, partitions
# 'batch' with PreemptMode=REQUEUE and 'urgent'): it submits jobs, preempts one, sets a node
# down and back up, and takes about five minutes because requeued jobs wait ~121 s.
# shellcheck disable=SC2016  # the job bodies expand on the compute node, not here
set -euo pipefail

out=${1:?usage: record.sh OUTDIR}
mkdir -p "$out"
work=$(mktemp -d /tmp/hpcjobs-record.XXXXXX)
chmod 755 "$work"
cd "$work"

SQUEUE_FIELDS='JobArrayID:|,JobID:|,ArrayJobID:|,ArrayTaskID:|,State:|,Reason:|,NodeList:|,TimeUsed:|,NumNodes:|,RestartCnt:|,Partition:|,UserName:|,Name:|'
SACCT_FIELDS='JobID,JobIDRaw,State,ExitCode,DerivedExitCode,Reason,Submit,Eligible,Start,End,Elapsed,NNodes,NodeList,Partition,User,JobName'

submit() { sbatch --parsable -o "$work/%x-%j.out" "$@"; }
# Small jobs go to n3, so n1 and n2 stay free for the preemption and node-failure cases.
small() { submit -w n3 "$@"; }
# Runs once for the first start, and only prints on a restart.
once='if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then sleep 600; else echo restarted; fi'

sbatch --version >"$out/sbatch-version.txt"
scontrol show config >"$out/scontrol-show-config.txt"

ok=$(small -J rec-ok --wrap 'echo hello')
fail=$(small -J rec-fail --wrap 'exit 3')
timeout=$(small -J rec-timeout -t 1 --wrap 'sleep 600')
cancel=$(small -J rec-cancel --wrap 'sleep 600')
array=$(small -J rec-array --array=0-2 --wrap 'exit $SLURM_ARRAY_TASK_ID')
held=$(submit -J 'rec held|odd name' --hold --array=0-9%2 --comment hpcjobs:rec-token \
  --wrap 'true')
selfrq=$(small -J rec-selfrequeue --requeue \
  --wrap 'if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then scontrol requeue "$SLURM_JOB_ID"; sleep 60; else echo restarted; fi')
preempted=$(submit -J rec-preempted --requeue -p batch -w n1 --exclusive --wrap "$once")
nodefail=$(submit -J rec-nodefail --requeue -p batch -w n2 --exclusive --wrap "$once")
echo "$ok" >"$out/sbatch-parsable.txt"

sleep 5
scancel "$cancel"
preemptor=$(submit -J rec-preemptor -p urgent -w n1 --exclusive --wrap 'sleep 5')
scontrol update nodename=n2 state=down reason=hpcjobs-record
sleep 20
scontrol update nodename=n2 state=resume 2>/dev/null || true  # ReturnToService may have done it

# Requeued jobs now wait in PENDING (BeginTime): the queue shows them with RestartCnt=1.
squeue -h -t all -O "$SQUEUE_FIELDS" >"$out/squeue-all.txt"
squeue -h -t all -j "$selfrq,$preempted,$nodefail,$held" -O "$SQUEUE_FIELDS" \
  >"$out/squeue-requeued.txt"
squeue -h -t all -O 'ArrayJobID:|,JobID:|,Comment:|' >"$out/squeue-token.txt"
scontrol show job -o "$preempted" >"$out/scontrol-show-job-requeued.txt"
scontrol show job -o "$array" >"$out/scontrol-show-job-array.txt"
scancel "$held"

# Wait for the restarts (requeue delay ~121 s) and the time limit.
deadline=$((SECONDS + 400))
while ((SECONDS < deadline)); do
  left=$(squeue -h -t PD,R,CG -j "$selfrq,$preempted,$nodefail,$timeout" -o %i | wc -l)
  ((left == 0)) && break
  sleep 10
done
sleep 5
ids="$ok,$fail,$timeout,$cancel,$array,$held,$selfrq,$preempted,$nodefail,$preemptor"
sacct -X -P -n -D -j "$ids" -o "$SACCT_FIELDS" >"$out/sacct-duplicates.txt"
sacct -X -P -n -j "$ids" -o "$SACCT_FIELDS" >"$out/sacct.txt"
cat >"$out/jobs.txt" <<JOBS
ok=$ok
fail=$fail
timeout=$timeout
cancel=$cancel
array=$array
held=$held
selfrequeue=$selfrq
preempted=$preempted
nodefail=$nodefail
preemptor=$preemptor
JOBS
echo "recorded into $out"
