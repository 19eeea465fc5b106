"""The one place that knows algorithm names.

Each entry says which TRL config class and trainer class run the algorithm (TRL's own where
it computes the book's math exactly, ours in custom_losses/ where it does not), which
family builds its data and trainer (rlhf_recipes/families/<family>.py), and the values
that make it this algorithm rather than its neighbour (`defaults`, applied before the
recipe's own values). Classes are named by import path so that validating a recipe
does not import every trainer.

Adding an algorithm: one entry here + one recipes/<name>.yaml (+ a loss function and a
trainer subclass in custom_losses/ when TRL lacks it).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any


@dataclass(frozen=True)
class Algorithm:
    name: str
    family: str  # module under rlhf_recipes.families
    config_class: str  # "module:Class"
    trainer_class: str  # "module:Class"
    paper: str
    chapter: str
    defaults: dict[str, Any] = field(default_factory=dict)
    key_metrics: tuple[str, ...] = ()  # plotted in curves.png next to the loss
    tiny: dict[str, Any] = field(default_factory=dict)  # per-algorithm additions to the tiny profile


def import_object(path: str) -> Any:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def family_of(algorithm: Algorithm) -> ModuleType:
    return importlib.import_module(f"rlhf_recipes.families.{algorithm.family}")


_DPO_METRICS = ("rewards/accuracies", "rewards/margins", "rewards/chosen", "rewards/rejected")
_BOOK_DPO = dict(
    family="direct_alignment",
    config_class="custom_losses.direct_alignment:BookDPOConfig",
    trainer_class="custom_losses.direct_alignment:BookDPOTrainer",
    key_metrics=_DPO_METRICS,
)

ALGORITHMS: dict[str, Algorithm] = {
    a.name: a
    for a in [
        # --- direct alignment (book chapter 8) ------------------------------------------
        Algorithm(
            "dpo", family="direct_alignment", config_class="trl:DPOConfig", trainer_class="trl:DPOTrainer",
            paper="Rafailov et al. 2023, Direct Preference Optimization", chapter="8",
            defaults={"loss_type": ["sigmoid"]}, key_metrics=_DPO_METRICS,
        ),
        Algorithm(
            "cdpo", **_BOOK_DPO, paper="Mitchell 2023, A note on DPO with noisy preferences (conservative DPO)",
            chapter="8", defaults={"book_loss": "cdpo", "label_smoothing": 0.1},
        ),
        Algorithm(
            "dpo_norm", family="direct_alignment", config_class="trl:DPOConfig", trainer_class="trl:DPOTrainer",
            paper="Rafailov et al. 2023 (DPO) with length-averaged log-ratios", chapter="8",
            defaults={"loss_type": ["sigmoid_norm"]}, key_metrics=_DPO_METRICS,
        ),
        Algorithm(
            "ipo", **_BOOK_DPO, paper="Azar et al. 2023, A General Theoretical Paradigm (IPO)", chapter="8",
            defaults={"book_loss": "ipo"},
        ),
        Algorithm(
            "simpo", family="direct_alignment", config_class="trl.experimental.cpo:CPOConfig",
            trainer_class="trl.experimental.cpo:CPOTrainer",
            paper="Meng et al. 2024, SimPO: Simple Preference Optimization", chapter="8",
            defaults={"loss_type": "simpo", "cpo_alpha": 0.0}, key_metrics=_DPO_METRICS,
        ),
        Algorithm(
            "orpo", **{**_BOOK_DPO, "key_metrics": _DPO_METRICS + ("nll_loss", "log_odds_chosen")},
            paper="Hong et al. 2024, ORPO: Monolithic Preference Optimization", chapter="8",
            defaults={"book_loss": "orpo"},
        ),
        Algorithm(
            "kto", **{**_BOOK_DPO, "key_metrics": _DPO_METRICS + ("kl",)},
            paper="Ethayarajh et al. 2024, KTO: Model Alignment as Prospect Theoretic Optimization", chapter="8",
            defaults={"book_loss": "kto"},
        ),
        Algorithm(
            "apo_zero", family="direct_alignment", config_class="trl:DPOConfig", trainer_class="trl:DPOTrainer",
            paper="D'Oosterlinck et al. 2024, Anchored Preference Optimization (APO-zero)", chapter="8",
            defaults={"loss_type": ["apo_zero"]}, key_metrics=_DPO_METRICS,
        ),
        Algorithm(
            "apo_down", family="direct_alignment", config_class="trl:DPOConfig", trainer_class="trl:DPOTrainer",
            paper="D'Oosterlinck et al. 2024, Anchored Preference Optimization (APO-down)", chapter="8",
            defaults={"loss_type": ["apo_down"]}, key_metrics=_DPO_METRICS,
        ),
        # --- policy gradients (book chapter 6) -------------------------------------------
        # --- reward models (book chapter 5) ----------------------------------------------
    ]
}
