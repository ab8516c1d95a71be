"""From a request to a batch script: the job spec, resolving it against the site, CPU/GPU/NIC
binding, NCCL/UCX tuning, sbatch options and rendering the Jinja2 templates."""
