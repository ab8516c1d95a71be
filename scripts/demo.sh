#!/usr/bin/env bash
# The hpcjobs demo, from a fresh machine: set everything up, start the local sandbox cluster
# (a real Slurm with 3 nodes x 4 fake GPUs) and run a real 2-node job on it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
HPCJOBS=.venv/bin/hpcjobs

echo
echo "== Starting the sandbox cluster"
$HPCJOBS sandbox up
eval "$($HPCJOBS sandbox env)"
sinfo -o "%P %D %N %G %t"

echo
echo "== A 2-node job: one task per GPU, 8 tasks in all"
out=$(mktemp -d /tmp/hpcjobs-demo.XXXXXX)
chmod 755 "$out"
cat > "$out/job.sh" <<'JOB'
#!/bin/bash
srun bash -c 'echo "rank $SLURM_PROCID on $SLURMD_NODENAME sees GPUs $CUDA_VISIBLE_DEVICES"'
JOB
job=$(sbatch --parsable -J hpcjobs-demo -N 2 --gpus-per-node=4 --ntasks-per-node=4 \
    -o "$out/%j.out" "$out/job.sh")
echo "submitted job $job"
for _ in $(seq 120); do
    state=$(sacct -X -n -P -j "$job" -o State | head -1)
    [[ $state == COMPLETED || $state == FAILED || $state == CANCELLED* ]] && break
    sleep 0.5
done
sleep 2  # slurmdbd records the finished job a moment later
sort -k2n "$out/$job.out"
sacct -j "$job" -o JobID,JobName,State,NNodes,NodeList,Elapsed

echo
echo "Done. The sandbox is still running: 'eval \"\$($HPCJOBS sandbox env)\"' to use it,"
echo "'$HPCJOBS sandbox down' to stop it."
