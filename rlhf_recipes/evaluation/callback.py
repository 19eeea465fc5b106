"""Periodic held-out evaluation during training: `eval_every` optimizer steps, on `eval_problems` problems.

The family's own evaluator (the same one `rlhf-recipes evaluate` runs) scores the live model on the main
process, greedy only (no pass@k), and the numbers are logged as `eval/<metric>` through the Trainer's own
`log`, so they land in metrics.jsonl, curves.png and wandb next to the training reward. The random state of
every device is saved and restored around it, so a run with and without eval_every trains identically.
A sharded model (ZeRO-3) cannot generate on one process: eval_every is refused there; evaluate checkpoints
with `rlhf-recipes evaluate` instead.
"""

from __future__ import annotations

import logging

from transformers import Trainer, TrainerCallback

from rlhf_recipes.errors import RecipeError
from rlhf_recipes.evaluation.base import summarize

logger = logging.getLogger(__name__)


class PeriodicEvaluation(TrainerCallback):
    def __init__(self, evaluator, every: int):
        self.evaluator = evaluator
        self.every = every
        self.trainer = None
        self.last_intervals: dict = {}  # the last evaluation's 95% intervals, by metric

    def attach(self, trainer) -> None:
        """The trainer whose `log` records the numbers; refuses a ZeRO-3-sharded model."""
        if trainer.is_deepspeed_enabled and trainer.accelerator.state.deepspeed_plugin.zero_stage == 3:
            raise RecipeError(f"{self.evaluator.recipe.where('eval_every')}: periodic evaluation generates on the "
                              "main process, which a ZeRO-3-sharded model cannot do; set eval_every 0 and evaluate "
                              "checkpoints with `rlhf-recipes evaluate RUN_DIR/checkpoint-N`")
        self.trainer = trainer

    def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        if self.trainer is None or not self.due(state.global_step) or not state.is_world_process_zero:
            return
        metrics = self.measure(model, processing_class)
        self.log(state, control, metrics)
        self.observe(state, control, model, metrics)

    def due(self, step: int) -> bool:
        return step % self.every == 0

    def measure(self, model, tokenizer=None) -> dict[str, float]:
        """The held-out numbers of the live model now (greedy, in eval mode, training's random state untouched)."""
        import torch

        devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
        was_training = model.training
        model.eval()  # no dropout in the held-out numbers
        try:
            with torch.random.fork_rng(devices=devices):  # training's random stream is left as it was
                scores = self.evaluator.score(model, tokenizer or self.trainer.processing_class)
        finally:
            model.train(was_training)
        metrics, self.last_intervals = summarize(scores, self.evaluator.options.seed)
        return {k: v for k, v in metrics.items() if isinstance(v, (int, float))}

    def log(self, state, control, metrics: dict[str, float]) -> None:
        logs = {f"eval/{k}": v for k, v in metrics.items()}
        logger.info("step %d held-out: %s", state.global_step, ", ".join(f"{k} {v:.4g}" for k, v in logs.items()))
        # transformers' own Trainer.log: TRL trainers' log() would merge (and clear) their pending train metrics.
        # It also clears control.should_log, which the step's own training log still needs.
        should_log = control.should_log
        Trainer.log(self.trainer, logs)
        self.trainer.control.should_log = control.should_log = should_log

    def observe(self, state, control, model, metrics: dict[str, float]) -> None:
        """What a subclass does with each evaluation (evaluation/target.py keeps and stops); here: nothing."""
