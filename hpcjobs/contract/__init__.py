"""What both sides of hpcjobs agree on, defined once: the submit side (the command line, the
Python API, reports) and the job side (the supervisor, its node agents, the ranks) import it,
and the supervisor's zipapp carries it (:mod:`hpcjobs.jobs.supervisorapp`).

Standard library only, Python 3.8 or newer, and it imports nothing else of hpcjobs:

- :mod:`.causes`: why a run of a chain ended, the one vocabulary;
- :mod:`.names`: the files a chain keeps in its output folder;
- :mod:`.jobenv`: the names the batch script and the job share;
- :mod:`.eventlog`: the chain's event log, its format, its one parser, what a chain says;
- :mod:`.slurmtime`, :mod:`.slurmstates`, :mod:`.slurmtext`: Slurm's time syntax, job states
  and ``scontrol`` fields, each read one way;
- :mod:`.slurmcmd`: the one small Slurm runner of the job side;
- :mod:`.suspects`: the user's suspect nodes across chains, and the repeat offenders;
- :mod:`.faultdefaults`: the defaults of the fault rules a site tunes (``faults``).
"""
