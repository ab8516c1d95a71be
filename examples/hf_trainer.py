"""The Hugging Face Trainer under hpcjobs (docs/frameworks.md).

    hpcjobs submit -N 1 --gpus-per-node 1 -t 1:00 -- python examples/hf_trainer.py --save-steps 10

The script is an ordinary Trainer script: it saves ``checkpoint-<step>`` every ``--save-steps``
steps and, as the Trainer's example scripts do, resumes from the newest one in its
``output_dir`` (``get_last_checkpoint``). On preemption hpcjobs lets it run until Slurm's
SIGTERM (it listens for no warning), and the next run resumes from its newest checkpoint.
``--hpcjobs-callback`` adds :class:`hpcjobs.runtime.integrations.hf.HpcjobsTrainerCallback`
(one line): the Trainer then saves at the step the warning came and stops, and hpcjobs knows
the step reached.

A tiny GPT-2 built from a config (nothing is downloaded), trained on random tokens on the CPU.
``--trace FILE`` appends ``<pid> <step>`` for every step trained (the tests count redone steps).
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments
from transformers.trainer_utils import get_last_checkpoint


class Tokens(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    def __init__(self, count: int) -> None:
        generator = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 64, (count, 16), generator=generator)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[index], "labels": self.ids[index]}


class Trace(TrainerCallback):
    """Slows each step down and writes it to the trace file (the test's instrument)."""

    def __init__(self, path: str, step_time: float) -> None:
        self.path = path
        self.step_time = step_time

    def on_step_begin(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        if self.path:
            with open(self.path, "a") as handle:
                handle.write(f"{os.getpid()} {state.global_step}\n")
        time.sleep(self.step_time)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--save-steps", type=int, default=10)
    parser.add_argument("--step-time", type=float, default=0.05)
    parser.add_argument("--output-dir", default="hf-output")
    parser.add_argument("--trace", default="")
    parser.add_argument("--hpcjobs-callback", action="store_true")
    args = parser.parse_args()
    config = GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=64, n_positions=16)
    model = GPT2LMHeadModel(config)
    training = TrainingArguments(
        output_dir=args.output_dir,
        max_steps=args.steps,
        save_steps=args.save_steps,
        per_device_train_batch_size=4,
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        logging_steps=50,
        save_total_limit=3,
    )
    callbacks: list[TrainerCallback] = [Trace(args.trace, args.step_time)]
    if args.hpcjobs_callback:
        from hpcjobs.runtime.integrations.hf import HpcjobsTrainerCallback

        callbacks.append(HpcjobsTrainerCallback())
    trainer = Trainer(model=model, args=training, train_dataset=Tokens(4096), callbacks=callbacks)
    last = get_last_checkpoint(args.output_dir) if os.path.isdir(args.output_dir) else None
    trainer.train(resume_from_checkpoint=last)


if __name__ == "__main__":
    main()
