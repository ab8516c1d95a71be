#!/usr/bin/env bash
# The hpcjobs demo, from a fresh machine:
#   1. set everything up and start the local sandbox cluster (a real Slurm: 3 nodes x 4 GPUs),
#   2. train a small DDP model on 2 nodes, uninterrupted, for a reference digest,
#   3. train it again and preempt it with an 'urgent' job halfway through,
#   4. watch it checkpoint, continue as a new job within seconds and resume from its checkpoint,
#   5. check that both runs end with the same weights, and print the job's history.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
HPCJOBS=$PWD/.venv/bin/hpcjobs
PYTHON=$PWD/.venv/bin/python
STEPS=${DEMO_STEPS:-120}

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "Starting the sandbox cluster"
$HPCJOBS sandbox up
eval "$($HPCJOBS sandbox env)"
sinfo -o "%P %D %N %G %t"

work=$(mktemp -d /tmp/hpcjobs-demo.XXXXXX)
chmod 755 "$work"
train=("$PYTHON" "$PWD/examples/ddp_train.py" --steps "$STEPS" --step-time 0.1 --checkpoint-every 20)
job_opts=(--site sandbox submit -J ddp-demo -N 2 --gpus-per-node 2 -t 10:00)

say "Reference: $STEPS steps of DDP on 2 nodes x 2 GPUs (4 ranks), uninterrupted"
$HPCJOBS "${job_opts[@]}" --output-dir "$work/reference" --wait -- "${train[@]}" >/dev/null
reference=$(grep -ho 'final weights digest [0-9a-f]*' "$work"/reference/slurm-*.out | awk '{print $4}')
echo "reference digest: $reference"

say "The same training, preempted halfway"
job=$($HPCJOBS "${job_opts[@]}" --output-dir "$work/run" -- "${train[@]}")
echo "submitted job $job; waiting until it has trained a while"
for _ in $(seq 300); do
    grep -qs "step $((STEPS / 2))/" "$work"/run/slurm-*.out && break
    sleep 0.5
done
say "Preempting it: a 3-node job in partition 'urgent' needs every node"
$HPCJOBS --site sandbox submit -J urgent -p urgent -N 3 --gpus-per-node 0 -t 2:00 \
    --launcher none --sbatch=--exclusive --output-dir "$work/urgent" -- sleep 8
say "Following job $job across the preemption (hpcjobs logs -f)"
$HPCJOBS logs -f "$job"

say "History of job $job"
$HPCJOBS history "$job"

say "Where the GPU-hours of job $job went (hpcjobs report)"
$HPCJOBS report --line "$job"

digest=$(grep -ho 'final weights digest [0-9a-f]*' "$work"/run/slurm-*.out | awk '{print $4}')
say "Result"
echo "uninterrupted run: $reference"
echo "preempted run:     $digest"
if [[ -n $digest && $digest == "$reference" ]]; then
    echo "Same weights: the preempted run lost no work and resumed exactly."
else
    echo "The digests differ!" >&2
    exit 1
fi
echo
echo "Files are in $work. The sandbox is still running: 'eval \"\$($HPCJOBS sandbox env)\"'"
echo "to use it, '$HPCJOBS sandbox down' to stop it."
