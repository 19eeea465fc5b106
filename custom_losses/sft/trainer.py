"""BookSFTTrainer: TRL's SFTTrainer wired to the book's SFT; the math lives elsewhere.

- Loss reduction: each micro-batch's loss is its own token mean and the optimizer step's loss is
  the mean of the micro-batch means (the book), not a token mean over the whole accumulated batch
  (transformers' default when the model accepts loss kwargs). `model_accepts_loss_kwargs = False`
  makes transformers pass no `num_items_in_batch`, so SFTTrainer.compute_loss divides by the
  micro-batch's own token count and transformers divides by the accumulation steps.
- `drop_partial_steps`: the WholeStepSampler (sampler.py). Without it a partial last step is taken and
  `partial_step_scale` (steps.py) says what its micro-batch losses are divided by: the book's rejection
  sampling divides by gradient_accumulation_steps (transformers: by the micro-batches taken). The logged
  loss stays the mean of the step's micro-batch losses, as the book logs it.
- `book_lr_schedule`: the book's warmup + linear decay (custom_losses/schedules.py).
"""

from __future__ import annotations

import logging

from trl import SFTTrainer

from custom_losses.schedules import BookLRScheduleMixin
from custom_losses.sft.sampler import WholeStepSampler
from custom_losses.sft.steps import micro_batch_divisor

logger = logging.getLogger(__name__)


class BookSFTTrainer(BookLRScheduleMixin, SFTTrainer):
    _name = "BookSFT"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Set after Trainer.__init__, which reads it from the model's forward signature.
        self.model_accepts_loss_kwargs = False
        self._whole_step_sampler: WholeStepSampler | None = None

    def training_step(self, model, inputs, num_items_in_batch=None):
        # transformers sets current_gradient_accumulation_steps to the micro-batches of this step and divides each
        # micro-batch loss by it (model_accepts_loss_kwargs is False here).
        taken = self.current_gradient_accumulation_steps
        divisor = micro_batch_divisor(taken, self.args.gradient_accumulation_steps, self.args.partial_step_scale)
        if divisor == taken:
            return super().training_step(model, inputs, num_items_in_batch)
        self.current_gradient_accumulation_steps = divisor
        try:
            loss = super().training_step(model, inputs, num_items_in_batch)
        finally:
            self.current_gradient_accumulation_steps = taken
        return loss * (divisor / taken)  # for the log only: the mean of the step's micro-batch losses

    def _get_train_sampler(self, train_dataset=None):
        if not self.args.drop_partial_steps:
            return super()._get_train_sampler(train_dataset)
        dataset = train_dataset if train_dataset is not None else self.train_dataset
        step_size = self.args.train_batch_size * self.args.gradient_accumulation_steps * max(1, self.args.world_size)
        seed = self.args.data_seed if self.args.data_seed is not None else self.args.seed
        sampler = WholeStepSampler(len(dataset), step_size, seed=seed, epoch_of=self._current_epoch)
        if sampler.dropped_per_epoch and self.args.process_index == 0:
            logger.info("drop_partial_steps: %d rows, %d per optimizer step: %d steps per epoch, the %d rows left over "
                        "in each epoch's shuffle are dropped", len(dataset), step_size, sampler.steps_per_epoch,
                        sampler.dropped_per_epoch)
        self._whole_step_sampler = sampler
        return sampler

    def _current_epoch(self) -> int:
        """The epoch being started, from the optimizer steps taken (also right after a resume mid-epoch)."""
        return self.state.global_step // self._whole_step_sampler.steps_per_epoch
