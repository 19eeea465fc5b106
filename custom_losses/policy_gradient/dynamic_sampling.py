"""DAPO's dynamic sampling (RLHF book, chapter 6), as a mixin for BookGRPOTrainer.

A prompt group whose `dynamic_sampling_reward` is all at its min or all at its max (no
contrast, so zero advantages) is dropped, and the batch is refilled with groups from fresh
prompts, for at most `max_refill_rounds` extra rollout rounds; groups still missing after
them are filled with dropped groups whose loss is masked out (logged). Fresh prompts come
from their own seeded pass over the training set, whose position is checkpointed, so a
resumed run draws the prompts the uninterrupted run would have.

The mixin uses the trainer's `_score_round`, `_loss_mask`, `_monitor_record`, reward
weights and names, metrics, accelerator and tokenizer.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch

from custom_losses.policy_gradient.rollout_batch import concat_rollouts, masked_out, select_rows

logger = logging.getLogger(__name__)
DYNAMIC_SAMPLING_STATE = "dynamic_sampling_state.json"  # in each checkpoint of a dynamic_sampling run


class DynamicSamplingMixin:
    """Drop groups without reward contrast and refill the batch from fresh prompts (DAPO)."""

    def _dynamic_sampling_init(self) -> None:
        if self.args.dynamic_sampling and not hasattr(self.train_dataset, "__getitem__"):
            raise ValueError("dynamic_sampling refills from the training set by index: it needs a map-style Dataset")
        self._refill_order: list[int] = []
        self._refill_epoch = 0
        self._refill_taken = 0  # fresh prompts drawn so far (all processes); checkpointed, replayed on resume

    def _dynamic_sampling_keep(self, rewards_per_func: torch.Tensor, group: int) -> torch.Tensor:
        """(groups,) global: False for a group whose dynamic_sampling_reward is all min or all max."""
        values = rewards_per_func[:, self._reward_index[self.args.dynamic_sampling_reward]].view(-1, group).cpu()
        all_min = (values == self.args.dynamic_sampling_min).all(dim=1)
        all_max = (values == self.args.dynamic_sampling_max).all(dim=1)
        drop = all_min | all_max
        if self.args.dynamic_sampling_drop_any_equal:
            drop |= (values == values[:, :1]).all(dim=1)
        return ~drop

    def _next_refill_prompts(self, groups_per_process: int) -> list[dict[str, Any]]:
        """This process's share of the next fresh prompts, each repeated num_generations times.

        Fresh prompts come from their own seeded pass over the training set (the same on every
        process), so the main pass over the data is not disturbed.
        """
        world, rank = self.accelerator.num_processes, self.accelerator.process_index
        taken = self._take_refill_indices(world * groups_per_process)
        mine = taken[rank * groups_per_process:(rank + 1) * groups_per_process]
        return [dict(self.train_dataset[i]) for i in mine for _ in range(self.num_generations)]

    def _take_refill_indices(self, count: int) -> list[int]:
        while len(self._refill_order) < count:
            generator = torch.Generator().manual_seed(self.args.seed + 7919 * (self._refill_epoch + 1))
            self._refill_order += torch.randperm(len(self.train_dataset), generator=generator).tolist()
            self._refill_epoch += 1
        taken, self._refill_order = self._refill_order[:count], self._refill_order[count:]
        self._refill_taken += count
        return taken

    def _save_optimizer_and_scheduler(self, output_dir: str) -> None:
        super()._save_optimizer_and_scheduler(output_dir)
        if self.args.dynamic_sampling and self.args.should_save:
            state = {"refill_prompts_taken": self._refill_taken}
            (Path(output_dir) / DYNAMIC_SAMPLING_STATE).write_text(json.dumps(state) + "\n")

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        path = Path(checkpoint) / DYNAMIC_SAMPLING_STATE if checkpoint else None
        if not self.args.dynamic_sampling or path is None:
            return
        if not path.exists():
            logger.warning("%s has no %s: refill prompts start again from the first fresh prompt",
                           checkpoint, DYNAMIC_SAMPLING_STATE)
            return
        # The refill order is a function of the seed: replaying the count puts it where the saved run was.
        self._refill_order, self._refill_epoch, self._refill_taken = [], 0, 0
        self._take_refill_indices(json.loads(path.read_text())["refill_prompts_taken"])

    def _dynamic_sampling_batch(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        group = self.num_generations
        if len(inputs) % group:
            raise ValueError(
                f"dynamic_sampling needs whole prompt groups on each process, but this process holds {len(inputs)} "
                f"completions for num_generations {group}: make per_device_train_batch_size x steps_per_generation a "
                "multiple of num_generations (fewer processes, or a larger generation_batch_size)."
            )
        need = len(inputs) // group
        rank = self.accelerator.process_index
        metrics = self._metrics["train"]
        logged_before = {key: len(values) for key, values in metrics.items()}
        kept, spare, kept_rewards, first_round_kept = [], [], [], None
        records, trained = [], []  # per round: what to store, and which of this process's groups were trained on
        rounds, batch = 0, inputs
        while True:
            output, keep_groups, record = self._score_round(batch, defer_record=True)
            records.append(record)
            trained.append([False] * need)
            grouped = self._last_rewards_per_func.view(-1, group, len(self.reward_funcs))
            local_rewards = grouped[rank * need:(rank + 1) * need]
            if first_round_kept is None:
                first_round_kept = keep_groups.float().mean().item()
            for g, keep in enumerate(keep_groups[rank * need:(rank + 1) * need].tolist()):
                part = select_rows(output, slice(g * group, (g + 1) * group))
                if keep and len(kept) < need:
                    kept.append(part)
                    kept_rewards.append(local_rewards[g])
                    trained[-1][g] = True
                elif len(spare) < need:
                    spare.append(part)
            short = torch.tensor([need - len(kept)], device=self.accelerator.device)
            if int(self.accelerator.gather(short).max()) == 0 or rounds >= self.args.max_refill_rounds:
                break
            batch = self._next_refill_prompts(need)
            rounds += 1
        filler = [masked_out(p) for p in spare[: need - len(kept)]]
        result = concat_rollouts(kept + filler, self._tokenizer.pad_token_id)
        result["num_items_in_batch"] = self.accelerator.gather(self._loss_mask(result).sum()).sum()
        self._log_kept_rewards(kept_rewards, logged_before)
        for record, flags in zip(records, trained):  # `kept` in the rollout store = trained on
            flags = self.accelerator.gather(torch.tensor(flags, device=self.accelerator.device)).cpu()
            self._monitor_record(**{**record, "kept": flags.repeat_interleave(group).tolist()})
        device = self.accelerator.device
        masked = self.accelerator.gather(torch.tensor([float(len(filler))], device=device)).sum().item()
        metrics["dynamic_sampling/refill_rounds"].append(float(rounds))
        metrics["dynamic_sampling/kept_groups_first_round"].append(first_round_kept)
        metrics["dynamic_sampling/masked_groups"].append(masked)
        if filler:
            logger.warning("dynamic sampling: %d group(s) still lacked reward contrast after %d refill rounds; "
                           "their loss is masked out", len(filler), rounds)
        return result

    def _log_kept_rewards(self, kept_rewards: list[torch.Tensor], logged_before: dict[str, int]) -> None:
        """Reward metrics over the groups trained on, as the book averages its filtered buffer.

        TRL logged every round's rewards, dropped groups included; those entries are replaced
        by one value over the kept groups of all processes (kept as they are if none was kept).
        """
        from accelerate.utils import gather_object

        rows = [row for g in kept_rewards for row in g.tolist()]
        rows = [row for part in gather_object([rows]) for row in part]
        if not rows:
            return
        values = torch.tensor(rows, dtype=torch.float32)  # (kept completions, functions)
        total = (values * self.reward_weights.unsqueeze(0)).nansum(dim=1)
        replaced = {"reward": total.mean().item(), "reward_std": total.std().item() if len(total) > 1 else 0.0}
        for i, name in enumerate(self.reward_func_names):
            column = values[:, i]
            replaced[f"rewards/{name}/mean"] = torch.nanmean(column).item()
            replaced[f"rewards/{name}/std"] = column[~torch.isnan(column)].std().item() if len(column) > 1 else 0.0
        metrics = self._metrics["train"]
        for key, value in replaced.items():
            del metrics[key][logged_before.get(key, 0):]
            metrics[key].append(value)
