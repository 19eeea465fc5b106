"""Supervised fine-tuning as the book does it (chapter 4, package instruction_tuning).

config.py   BookSFTConfig: TRL's SFTConfig plus the three switches below;
trainer.py  BookSFTTrainer: TRL's SFTTrainer with the book's loss reduction, sampler and schedule (plumbing only);
sampler.py  WholeStepSampler: per epoch only whole optimizer steps (leftover micro-batches dropped);
the schedule's math is shared: custom_losses/schedules.py.
"""
