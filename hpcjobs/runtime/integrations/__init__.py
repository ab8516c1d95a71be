"""One line of user code for the frameworks researchers already run (docs/frameworks.md).

- :class:`hpcjobs.runtime.integrations.lightning.HpcjobsCallback` for PyTorch Lightning,
- :class:`hpcjobs.runtime.integrations.hf.HpcjobsTrainerCallback` for the Hugging Face Trainer,
- :class:`hpcjobs.runtime.integrations.accelerate.Checkpoints` for an Accelerate loop.

Each reports the step reached to hpcjobs (``hpcjobs history`` then knows the work lost at a
stop, ``hpcjobs report`` the goodput), saves on the warning at the next step's end in the
framework's own layout, asks hpcjobs to continue the run, and stops the training. Without them
hpcjobs still recovers: it delivers the warning on the signal the framework listens for and
honours the framework's own ``scontrol requeue``. The frameworks are imported by their modules
only; this package needs none of them.
"""
