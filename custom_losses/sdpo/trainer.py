"""The book's SDPO (chapter 12) on TRL's experimental SDPOTrainer: plumbing only.

TRL's SDPOTrainer already computes the book's math with BookSDPOConfig's defaults (top-k + tail
reverse KL, live teacher, the book's teacher prompt, the first successful rollout of the group as
demonstration, the teacher prompt cut on the left). BookSDPOTrainer changes the three places
where it differs from the book:

  _prepare_training_batch            prompt groups without a successful rollout are skipped and
                                     new prompts drawn (groups.collect_groups; TRL keeps them at
                                     zero loss); reward metrics over the accepted groups; `skipped`
  _compute_self_distillation_loss    the loss is losses.topk_tail_reverse_kl reduced by
                                     losses.group_token_mean (TRL: per-sequence mean, then mean)
  the loss mask                      losses.book_completion_mask: tokens != pad (TRL: up to and
                                     including the first end token)

and computes both distributions from logits at temperature 1 (TRL divides by the sampling
temperature; it matches the book only with temperature 1 and the sampling temperature in
generation_kwargs). Prompts come from their own seeded stream (groups.PromptStream), whose position
is checkpointed; the trainer's sampler only paces the optimizer steps.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch
from trl.data_utils import is_conversational
from trl.experimental.sdpo import SDPOTrainer

from custom_losses.policy_gradient.rollout_batch import concat_rollouts, select_rows
from custom_losses.policy_gradient.shared_prefill import prefill_once_per_prompt
from custom_losses.policy_gradient.trainer import _decode_raw_text
from custom_losses.sdpo.config import BookSDPOConfig
from custom_losses.sdpo.groups import PromptStream, collect_groups
from custom_losses.sdpo.losses import book_completion_mask, group_token_mean, topk_tail_reverse_kl

logger = logging.getLogger(__name__)
SDPO_STATE = "sdpo_state.json"  # in each checkpoint: how many prompts the stream has given


class BookSDPOTrainer(SDPOTrainer):
    """SDPOTrainer with the book's redraw of failed groups, group token mean and loss mask."""

    def __init__(self, model, reward_funcs=None, args: BookSDPOConfig | None = None, **kwargs):
        if args is None or not isinstance(args, BookSDPOConfig):
            raise TypeError("BookSDPOTrainer needs a BookSDPOConfig")
        _decode_raw_text(kwargs.get("processing_class"), None)
        super().__init__(model, reward_funcs=reward_funcs, args=args, **kwargs)
        if not args.logprobs_at_sampling_temperature:
            self.temperature = 1.0  # only the loss's logits read it; generation keeps args.temperature
        self._stream = PromptStream(len(self.train_dataset), args.seed)
        self._draw_totals = {"drawn": 0, "skipped": 0, "discarded": 0}

    def _generate_transformers(self, prompt_ids):
        # each prompt of a group prefilled once, as the policy gradients sample (shared_prefill.py: same tokens)
        with prefill_once_per_prompt(self.accelerator.unwrap_model(self.model)):
            return super()._generate_transformers(prompt_ids)

    # --- which groups a step trains on -----------------------------------------------------

    def _prepare_training_batch(self, inputs: list[dict[str, Any]]):
        if not (self.model.training and self.args.redraw_failed_groups):
            return super()._prepare_training_batch(inputs)
        group = self.num_generations
        need = len(inputs) // group  # this process's groups per optimizer step
        collected = collect_groups(self._draw_round, need, self.args.success_reward_threshold,
                                   self.args.max_draws, world_max=self._world_max)
        parts = [part for part, _ in collected.accepted]
        rows = [row for _, part_rows in collected.accepted for row in part_rows]
        batch = concat_rollouts(parts, self._tokenizer.pad_token_id)
        self._finish_batch(batch, rows, collected)
        return batch

    def _world_max(self, value: int) -> int:
        return int(self.accelerator.gather(torch.tensor([value], device=self.accelerator.device)).max())

    def _draw_round(self, count: int) -> list[tuple[tuple[dict, list], torch.Tensor]]:
        """Draw `count` prompts on this process, roll out and score each group: ((batch part, rows), rewards)."""
        group = self.num_generations
        indices = self._stream.take_for(count, self.accelerator.num_processes, self.accelerator.process_index)
        rows = [dict(self.train_dataset[i]) for i in indices for _ in range(group)]
        batch = self.sample_rollouts(rows)
        if self.args.book_end_token_mask:
            batch["completion_mask"] = book_completion_mask(
                batch["completion_ids"], batch["completion_mask"], self._tokenizer.pad_token_id)
        rewards_per_func = self._calculate_rewards(rows, *self._prompts_and_completions(rows, batch))
        rewards = self._weighted(rewards_per_func)
        n = len(rows)
        start = self.accelerator.process_index * n
        local_rewards = rewards[start:start + n]
        local_per_func = rewards_per_func[start:start + n]
        batch["rewards"] = local_rewards
        batch["rewards_per_func"] = local_per_func
        out = []
        for g in range(count):
            part = select_rows(batch, slice(g * group, (g + 1) * group))
            out.append(((part, rows[g * group:(g + 1) * group]), local_rewards[g * group:(g + 1) * group].cpu()))
        return out

    def _prompts_and_completions(self, rows, batch):
        prompts = [row["prompt"] for row in rows]
        completion_ids_list = self._get_completion_ids_list(batch)
        texts = self.processing_class.batch_decode(batch["completion_ids"], skip_special_tokens=True)
        if is_conversational({"prompt": prompts[0]}):
            completions = [[{"role": "assistant", "content": text}] for text in texts]
        else:
            completions = texts
        return prompts, completions, completion_ids_list

    def _weighted(self, rewards_per_func: torch.Tensor) -> torch.Tensor:
        return (rewards_per_func * self.reward_weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)

    def _finish_batch(self, batch: dict[str, Any], rows: list[dict], collected) -> None:
        """What TRL's _prepare_training_batch does after scoring, on the accepted groups; metrics."""
        mode, group = "train", self.num_generations
        rewards_per_func = self.accelerator.gather(batch.pop("rewards_per_func"))
        rewards = self.accelerator.gather(batch["rewards"])
        grouped = rewards.view(-1, group)
        std = grouped.std(dim=1)
        advantages = (grouped - grouped.mean(dim=1, keepdim=True)) / (std.unsqueeze(1) + 1e-4)
        n = batch["completion_ids"].size(0)
        start = self.accelerator.process_index * n
        batch["advantages"] = advantages.reshape(-1)[start:start + n]  # used only by a policy-gradient term
        self._record_reward_diagnostics(mode, rewards, rewards_per_func, std)
        self._record_completion_metrics(mode, batch)
        metrics = self._metrics[mode]
        metrics["reward"].append(rewards.mean().item())  # over the accepted groups, as the book logs it
        metrics["reward_std"].append(rewards.std().item() if rewards.numel() > 1 else 0.0)
        for i, name in enumerate(self.reward_func_names):
            metrics[f"rewards/{name}/mean"].append(torch.nanmean(rewards_per_func[:, i]).item())
        counts = torch.tensor([collected.skipped, collected.drawn, collected.discarded], device=self.accelerator.device,
                              dtype=torch.float32)
        skipped, drawn, discarded = self.accelerator.reduce(counts, reduction="sum").tolist()
        metrics["skipped"].append(skipped)
        metrics["sdpo/prompts_drawn"].append(drawn)
        metrics["sdpo/discarded_groups"].append(discarded)
        for key, value in (("drawn", drawn), ("skipped", skipped), ("discarded", discarded)):
            self._draw_totals[key] += int(value)

        prompts = [row["prompt"] for row in rows]
        teacher = self.teacher_context_builder.build(batch, prompts, batch["rewards"], feedbacks=[None] * len(rows))
        for key, value in self.teacher_context_builder.last_metrics.items():
            metrics[key].append(value)
        batch.update(teacher)

    # --- the loss ---------------------------------------------------------------------------

    def _compute_self_distillation_loss(self, model, inputs, distillation_logits):
        topk_tail = (self.args.distillation_mode == "topk_logits" and self.args.distillation_add_tail
                     and self.args.distillation_alpha == 1.0)
        if not (self.args.group_token_mean and topk_tail):
            return super()._compute_self_distillation_loss(model, inputs, distillation_logits)
        per_token = topk_tail_reverse_kl(distillation_logits.student_logits, distillation_logits.teacher_logits,
                                         self.args.distillation_topk)
        mask = distillation_logits.loss_mask
        loss = group_token_mean(per_token, mask, self.num_generations)
        mode = "train" if model.training else "eval"
        self._log_self_distillation_metric(mode, self.accelerator.gather(loss.detach()).mean().item())
        return loss

    # --- checkpoints --------------------------------------------------------------------------

    def _save_optimizer_and_scheduler(self, output_dir: str) -> None:
        super()._save_optimizer_and_scheduler(output_dir)
        if self.args.should_save:
            (Path(output_dir) / SDPO_STATE).write_text(json.dumps({"prompts_taken": self._stream.taken}) + "\n")

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        path = Path(checkpoint) / SDPO_STATE if checkpoint else None
        if path is None:
            return
        if not path.exists():
            logger.warning("%s has no %s: prompts are drawn from the start of the stream again", checkpoint, SDPO_STATE)
            return
        self._stream.replay(json.loads(path.read_text())["prompts_taken"])

    def draw_summary(self) -> dict[str, int]:
        return dict(self._draw_totals)
