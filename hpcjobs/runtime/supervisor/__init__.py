"""The job's supervisor: what runs on the batch host between a run's start and its end.

Standard library only, Python 3.8 or newer (checked with vermin): ``hpcjobs submit`` delivers
it next to the job's script as a zipapp (:mod:`hpcjobs.jobs.supervisorapp`) and the site's
``python3`` runs it, so nothing of hpcjobs needs to be installed on the compute nodes. Its
modules import only each other and :mod:`hpcjobs.contract`, which the zipapp carries.
"""
