"""What runs inside the job, on every rank: the checkpoint folder, the stop flag, ``Resumable``
and the distributed set-up. Only the standard library and these modules: a job must run where
the submit-side dependencies are missing (the import contracts in ``pyproject.toml`` check it).
torch is imported only by the functions that use a process group: a job without it runs the
rest.
"""
