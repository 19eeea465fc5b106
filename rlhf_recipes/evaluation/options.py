"""How one evaluation runs (EvalOptions, saved with its result) and the error it raises when it cannot."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from rlhf_recipes.errors import EvalError  # noqa: F401  (defined on the ground floor: data/ raises it too)

QUANTIZE = ("int8", "int4")


@dataclass
class EvalOptions:
    """How one evaluation runs; saved in the result's `settings` so the numbers can be reproduced."""

    name: str = "heldout"  # the result's file name (RUN_DIR/eval/<name>.json)
    split: str = "heldout"  # heldout; `all` (reward models: every row the recipe reads)
    num_problems: int | None = None  # None: the evaluator's default
    k: int = 0  # pass@k from k sampled completions per problem; 0: greedy only
    seed: int = 0
    batch_size: int = 8
    max_new_tokens: int | None = None  # None: the recipe's completion budget
    dtype: str | None = None
    quantize: str | None = None
    judge: str | None = None  # rm:PATH for preference win rates
    samples: int = 2  # sample generations kept in the result
    device: str | None = None

    def settings(self) -> dict[str, Any]:
        return asdict(self)
