"""Hugging Face Trainer: ``Trainer(..., callbacks=[HpcjobsTrainerCallback()])``
(docs/frameworks.md).

At each step's end the callback reports the step to hpcjobs; once the job's warning came (on
any rank) it has the Trainer save its ``checkpoint-<step>`` at that step and stop, and asks
hpcjobs to continue the run. The script resumes as Trainer scripts do,
``trainer.train(resume_from_checkpoint=get_last_checkpoint(output_dir))``.
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from .link import JobLink, request_continuation


class HpcjobsTrainerCallback(TrainerCallback):  # type: ignore[misc]
    """Reports progress and checkpoints on hpcjobs' warning (see the module docs)."""

    def __init__(self) -> None:
        self.link: JobLink | None = None

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> None:
        self.link = self.link or JobLink()

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> TrainerControl:
        link = self.link
        if link is None:
            return control
        link.step(state.global_step - 1)  # the last step finished (global_step counts them)
        if link.should_stop():
            control.should_save = True
            control.should_training_stop = True
            if state.is_world_process_zero:
                request_continuation()
        return control
