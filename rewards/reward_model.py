"""A trained reward model as a reward function (phase 2 of the classic RLHF pipeline).

    from rewards.reward_model import reward_model_reward
    rm = reward_model_reward("outputs/hh_rm")          # a run's output dir, or a checkpoint
    rm(prompts=[...], completions=[...])               # -> list[float], one per completion

The callable has TRL's reward-function shape, `f(completions, prompts=..., **columns)`, and a
`__name__` (`rm_<folder name>` unless `name` is given), so GRPOTrainer logs it as
`rewards/rm_hh_rm/mean`. A recipe names it as `rm:<path>` (see `reward_from_spec`).

The model loads on the first call, on the process's GPU when there is one (bf16) or the CPU
(fp32), is never trained, and scores completions in batches. It reads its input the way it
was trained (rewards/reward_model_encoding.py): a Bradley-Terry RM scores the chat-templated
conversation prompt + completion (its scalar reward), an ORM the completion after the
chat-templated prompt (mean token probability of "correct", in [0, 1]), a PRM the completion's
steps (probability that no step is bad, in [0, 1]). Prompts and completions may be
conversational (lists of messages) or plain text.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable

from rewards.reward_model_files import resolve_reward_model_dir

RM_PREFIX = "rm:"


class RewardModelScorer:
    """Loads a saved reward model lazily and scores (prompt, completion) pairs with it."""

    def __init__(self, path: str, batch_size: int = 16, device: str | None = None, dtype: str | None = None):
        self.path, self.batch_size, self.device, self.dtype = str(path), batch_size, device, dtype
        self.model = self.tokenizer = self.info = None

    def load(self) -> None:
        import torch

        from rewards.reward_model_scoring import load_reward_model

        if self.device is None:
            self.device = f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() else "cpu"
        if self.dtype is None:
            self.dtype = "bfloat16" if str(self.device).startswith("cuda") else "float32"
        self.model, self.tokenizer, self.info = load_reward_model(self.path, self.dtype)
        self.model.to(self.device).eval().requires_grad_(False)

    def __call__(self, prompts: list[Any] | None, completions: list[Any]) -> list[float]:
        from rewards.reward_model_scoring import score_completions

        if self.model is None:
            self.load()
        return score_completions(self.info, self.model, self.tokenizer, prompts, completions, self.batch_size)


def reward_name(path: str) -> str:
    """`rm_<folder>` as a Python identifier (a checkpoint keeps its run's name: rm_hh_rm_checkpoint_500)."""
    p = Path(path)
    parts = [p.parent.name, p.name] if p.name.startswith("checkpoint-") else [p.name]
    return "rm_" + re.sub(r"\W+", "_", "_".join(parts)).strip("_")


def reward_model_reward(path: str, batch_size: int = 16, device: str | None = None, dtype: str | None = None,
                        name: str | None = None) -> Callable[..., list[float]]:
    """A GRPO reward function that scores completions with the reward model saved at `path`."""
    resolve_reward_model_dir(path)  # fail now, not at the first rollout, if nothing is saved there
    scorer = RewardModelScorer(path, batch_size, device, dtype)

    def reward(completions: list[Any], prompts: list[Any] | None = None, **columns) -> list[float]:
        return scorer(prompts, completions)

    reward.__name__ = reward.__qualname__ = name or reward_name(path)
    reward.scorer = scorer  # for inspection (and tests)
    return reward


def reward_from_spec(spec: str, **options) -> Callable[..., list[float]]:
    """`rm:outputs/hh_rm` -> reward_model_reward("outputs/hh_rm", **options)."""
    if not spec.startswith(RM_PREFIX):
        raise ValueError(f"`{spec}` is not a reward-model reward; write it as {RM_PREFIX}<path to a saved RM>")
    return reward_model_reward(spec[len(RM_PREFIX):], **options)
