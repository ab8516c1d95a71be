"""`hpcjobs sandbox`: a real Slurm cluster on this host, for trying jobs and for the tests."""
