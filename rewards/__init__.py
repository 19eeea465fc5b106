"""Reward functions by name, for recipes to list (with `reward_weights`) under `reward_funcs`.

Every entry is a plain function `f(completions, **columns) -> list[float | None]`, as TRL's
GRPOTrainer calls it (it also passes `prompts`, `completion_ids` and the dataset's columns).
Each keeps its `__name__`, which is the registry name, so TRL logs it as
`rewards/<name>/mean` and `rewards/<name>/std`. A function with weight 0 is computed and
logged but not trained on (e.g. `binary_reward` next to the total).

A trained reward model is a reward too: list it as `rm:<path to its run or checkpoint>`
(rewards/reward_model.py); it is logged as `rewards/rm_<folder>/mean`.

Nothing here imports the runner; heavy libraries (reasoning-gym, math-verify, the reward
model) load when a function first runs, so validating a recipe stays fast.
"""

from __future__ import annotations

from typing import Callable

from rewards.length import make_overlong_penalty_reward, overlong_penalty_reward
from rewards.final_answer import gsm8k_reward
from rewards.finite import NonFiniteReward, finite_only
from rewards.reasoning_tasks import binary_reward, correctness_reward, format_reward, total_reward
from rewards.reward_model import RM_PREFIX

RewardFunc = Callable[..., list]

REWARDS: dict[str, RewardFunc] = {}


def register(func: RewardFunc | None = None, *, name: str | None = None, replace: bool = False):
    """Add a reward function under `name` (default: its __name__). Usable as a decorator.

    The registration must run in every process that trains, before the recipe is read. With `recipes/run.py` (and
    under `accelerate launch`), put the function in a module of this package, `rewards/<yours>.py`, and register it
    in the loop below; or keep it in your own script that calls `rewards.register(f)` and then
    `rlhf_recipes.train.main(["my_recipe.yaml", ...])` (its `reward_funcs` naming `f`), and launch that script
    instead of recipes/run.py."""

    def add(f: RewardFunc) -> RewardFunc:
        key = name or f.__name__
        if key != f.__name__:
            raise ValueError(f"reward `{key}` must keep its __name__ ({f.__name__!r}) so TRL logs it under that name")
        if key in REWARDS and REWARDS[key] is not f and not replace:
            raise ValueError(f"a reward named `{key}` is already registered")
        REWARDS[key] = f
        return f

    return add(func) if func is not None else add


for _f in (correctness_reward, format_reward, total_reward, binary_reward, overlong_penalty_reward, gsm8k_reward):
    register(_f)

# Functions with options: built from the trainer config's values (see build_reward_funcs).
FACTORIES: dict[str, Callable[..., RewardFunc]] = {
    "overlong_penalty_reward": lambda overlong_max_length=512, overlong_cache_length=128, **_: (
        make_overlong_penalty_reward(overlong_max_length, overlong_cache_length)
    ),
}



def check_names(names: list[str]) -> None:
    """Raise ValueError naming the closest registered reward for any unknown name."""
    import difflib

    for n in names:
        if n.startswith(RM_PREFIX):
            if not n[len(RM_PREFIX):].strip():
                raise ValueError(f"`{n}`: give the reward model's path, e.g. rm:outputs/hh_rm")
            continue
        if n not in REWARDS:
            close = difflib.get_close_matches(n, list(REWARDS), n=1, cutoff=0.5)
            hint = f" Did you mean `{close[0]}`?" if close else ""
            raise ValueError(f"unknown reward function `{n}`.{hint} Available: {', '.join(sorted(REWARDS))}")
    if len(set(names)) != len(names):
        raise ValueError(f"reward_funcs lists a function twice: {names}")


def get_reward(name: str, **options) -> RewardFunc:
    """The function registered as `name`, built with `options` when it takes any."""
    check_names([name])
    if name.startswith(RM_PREFIX):
        from rewards.reward_model import reward_from_spec

        return reward_from_spec(name)
    if name in FACTORIES:
        return FACTORIES[name](**options)
    return REWARDS[name]


def build_reward_funcs(names: list[str], **options) -> list[RewardFunc]:
    """The functions a trainer calls, each checked for NaN / inf rewards (rewards/finite.py)."""
    check_names(list(names))
    return [finite_only(get_reward(n, **options)) for n in names]


__all__ = [
    "REWARDS", "register", "get_reward", "build_reward_funcs", "check_names",
    "correctness_reward", "format_reward", "total_reward", "binary_reward", "overlong_penalty_reward",
    "make_overlong_penalty_reward", "gsm8k_reward", "NonFiniteReward", "finite_only",
]
