"""What the book published for each algorithm: the facts the tools compare a run with, none of which trains.

For each registry name: the book's run ids (wandb project rlhf-book/core), the batch shape that defines the
book's x-axis and rescalings, how the book's metric names map onto ours (rlhf_recipes/book_logs.py), its published
final numbers, and how its run differs from our recipe when older code made it. The training facts (classes,
family, the defaults that make an algorithm itself) are the registry's (rlhf_recipes/registry.py); only the tools
(compare, results, the nano book) read this module.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rlhf_recipes.book_logs import MetricMap, da_metrics, pg_metrics, rm_metrics, rs_metrics, sft_metrics


@dataclass(frozen=True)
class BookShape:
    """The batch shape of the book's run of an algorithm: what the book's x-axis and rescalings depend on."""

    prompts_per_rollout: int | None = None  # policy gradients: prompts in one rollout batch ...
    rollouts_per_prompt: int | None = None  # ... x completions per prompt
    accumulation_steps: int | None = None  # direct alignment: the book logs grad_norm / accumulation
    beta: float | None = None  # direct alignment


@dataclass(frozen=True)
class BookReference:
    runs: tuple[str, ...] = ()  # the book's published wandb run ids (project rlhf-book/core)
    shape: BookShape = BookShape()
    metrics: tuple[MetricMap, ...] = ()  # the book's metric names -> ours, with scales
    results: dict[str, float] = field(default_factory=dict)  # published final numbers (final_results.json keys)
    # How the book's run differs from this recipe, when it was made by older code with other settings; compare
    # prints it ("older setup: ...").
    run_setup: str = ""


def _direct_alignment(run: str | None, accumulation: int = 8, beta: float = 0.1,
                      margins_times_beta: bool = False) -> BookReference:
    """Chapter 8: the book's run `run` (code/direct_alignment/README.md), None where it publishes none (cdpo). Its
    loop logs once per optimizer step with step=global_step (our x-axis as is), grad_norm divided by the
    accumulation steps; batch 8 x accumulation 8, beta 0.1 unless stated."""
    return BookReference(runs=(run,) if run else (), shape=BookShape(accumulation_steps=accumulation, beta=beta),
                         metrics=da_metrics(accumulation, beta, margins_times_beta))


def _policy_gradient(run: str, prompts: int = 4, rollouts: int = 8) -> BookReference:
    """Chapter 6: the book's run `run` of `prompts` x `rollouts` completions per rollout batch."""
    return BookReference(runs=(run,), shape=BookShape(prompts_per_rollout=prompts, rollouts_per_prompt=rollouts),
                         metrics=pg_metrics())


# The three published RM runs were made by the book's April 2026 code (e893096); the recipes follow its later code
# (preference RM: July 2026; ORM and PRM: August 2026, a66b0bf). What differs, per run:
_OLDER_BOOK_RM_RUNS = {
    "1g3y9bcc": "1 epoch at 2x16, seed 42, no validation split (preference_rm.yaml: 2 epochs at 2x8, seed 123, 90/10)",
    "3gkoqb7f": "a different experiment: Qwen3-1.7B-Base on GSM8K gold answers plus synthetic wrong answers, lr 1e-4, "
                "3 epochs at 2x16, per-token accuracy (orm.yaml: Qwen3-0.6B on the GSM8K rollouts, lr 1e-5, 1 epoch "
                "at 1x32)",
    "iv4d966d": "up to 20 steps and 5500 tokens per trace, no validation split (prm.yaml: 12-step chunks, 2048 tokens, "
                "90/10)",
}


def _reward_model(run: str, kind: str) -> BookReference:
    """Chapter 5: the book's run `run`; kind: preference | outcome | process."""
    setup = (f"older setup: the book's run {run} was logged by its April 2026 code (unprefixed metric names): "
             f"{_OLDER_BOOK_RM_RUNS[run]}") if run in _OLDER_BOOK_RM_RUNS else ""
    return BookReference(runs=(run,), metrics=rm_metrics(kind), run_setup=setup)


def _rejection_sampling(run: str, accuracy: float) -> BookReference:
    """Chapter 9: the book's run `run` reached `accuracy` on the first 200 GSM8K test questions; its base
    Qwen3-1.7B 0.760 (within noise of each other)."""
    return BookReference(runs=(run,), metrics=rs_metrics(),
                         results={"test_accuracy": accuracy, "base_test_accuracy": 0.760})


BOOK: dict[str, BookReference] = {
    # --- direct alignment (chapter 8) ---
    "dpo": _direct_alignment("fzy8k8go"),
    "cdpo": _direct_alignment(None, accumulation=4),
    "dpo_norm": _direct_alignment("giyhitjw", beta=2.0),
    "ipo": _direct_alignment("5s29syo6"),
    # Its rewards/margins are beta * (avg_c - avg_r) like CPO's; the book logs avg_c - avg_r.
    "simpo": _direct_alignment("ftv5rs3x", beta=2.0, margins_times_beta=True),  # noisy (the book)
    "orpo": _direct_alignment("o38ffli5"),  # noisy (the book)
    "kto": _direct_alignment("hgqrkfi6"),
    "apo_zero": _direct_alignment("3m2uiyw3"),
    "apo_down": _direct_alignment("tqzkmyi6"),
    # --- policy gradients (chapter 6) ---
    "reinforce": _policy_gradient("0uqbq4oz", prompts=8, rollouts=1),
    "rloo": _policy_gradient("07xeasn8"),
    "grpo": _policy_gradient("vjp7lgdi"),
    "drgrpo": _policy_gradient("a1swuynq"),
    "gspo": _policy_gradient("10sxytli"),
    "cispo": _policy_gradient("6dg0m06n"),
    "sapo": _policy_gradient("79608nwk"),
    "dapo": _policy_gradient("db1pipip"),
    "maxrl": _policy_gradient("fdowf1se"),
    "ppo": _policy_gradient("ku3r3g9j", prompts=16, rollouts=1),
    # --- supervised fine-tuning (chapter 4) ---
    "sft": BookReference(runs=("nybj8sdx",), metrics=sft_metrics()),
    # --- rejection sampling (chapter 9) ---
    "rejection_sampling_top_per_prompt": _rejection_sampling("ohm3xnga", 0.790),
    "rejection_sampling_random_per_prompt": _rejection_sampling("y3pbcla7", 0.795),
    "rejection_sampling_top_k_overall": _rejection_sampling("w75hklzs", 0.800),
    "rejection_sampling_random_k_overall": _rejection_sampling("egeyr1q3", 0.770),
    # --- self-distillation (chapter 12): no published run id ---
    "sdpo": BookReference(shape=BookShape(prompts_per_rollout=16, rollouts_per_prompt=8)),
    # --- reward models (chapter 5) ---
    "preference_rm": _reward_model("1g3y9bcc", "preference"),
    "orm": _reward_model("3gkoqb7f", "outcome"),
    "prm": _reward_model("iv4d966d", "process"),
}


def book_reference(name: str) -> BookReference:
    """The book's facts for a registry name; an algorithm the book never ran has none (an empty reference)."""
    return BOOK.get(name, BookReference())
