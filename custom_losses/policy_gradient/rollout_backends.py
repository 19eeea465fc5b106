"""Rollout backends: which engine samples the completions of a policy-gradient or PPO run.

One recipe key, `rollout_backend`, picks a backend; each maps onto TRL 1.16's own GRPOConfig
options (nothing here generates). Whatever the backend, the loss's log-probs, the old log-probs
of the importance ratio and the reference's come from the training model's forward pass at
temperature 1 (the book's choice, BookGRPOTrainer): a backend only chooses how tokens are sampled.

  hf                    transformers `generate` with a dynamic KV cache (today's path, the book's loop)
  static_cache          `generate` with a preallocated static KV cache (cache_implementation: static);
                        on CUDA transformers compiles the decoding step with torch.compile
  continuous_batching   transformers' continuous batching engine, paged KV cache
                        (use_transformers_continuous_batching)
  vllm_colocate         vLLM in each training process, sharing its GPU (use_vllm, vllm_mode: colocate)
  vllm_server           a separate `trl vllm-serve` process on other GPUs (use_vllm, vllm_mode: server)

This module imports no torch at import time: the runner's checks read it before anything loads.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any, Callable

# TRL's GRPOConfig options a backend sets, with TRL's own defaults (a recipe that leaves them at these
# values gets the backend's; one that sets another value contradicts the backend and is told so).
TRL_DEFAULTS: dict[str, Any] = {
    "use_vllm": False,
    "vllm_mode": "colocate",
    "use_transformers_continuous_batching": False,
}

# Sampling settings some backend cannot apply -> the value at which the setting does nothing.
SAMPLING_NEUTRAL: dict[str, Any] = {"min_p": 0.0, "repetition_penalty": 1.0}


@dataclass(frozen=True)
class RolloutBackend:
    name: str
    summary: str
    trl_options: dict[str, Any]  # GRPOConfig option -> value
    # sampling settings it cannot apply (beyond temperature, which every backend applies)
    unsupported_sampling: tuple[str, ...] = ()
    needs_cuda: bool = False
    package: str | None = None  # an optional extra (pyproject.toml) of the same name
    # GenerationConfig attributes set on the trainer's generation config after TRL built it (TRL builds it
    # with disable_compile=True; transformers compiles a static cache's decoding step on CUDA when it is False)
    generation_config: tuple[tuple[str, Any], ...] = ()


BACKENDS: dict[str, RolloutBackend] = {b.name: b for b in (
    RolloutBackend("hf", "transformers generate, dynamic KV cache (the book's loop)", {
        "use_vllm": False, "use_transformers_continuous_batching": False}),
    RolloutBackend("static_cache", "transformers generate, static KV cache, torch.compile on CUDA", {
        "use_vllm": False, "use_transformers_continuous_batching": False, "cache_implementation": "static"},
        generation_config=(("disable_compile", False),)),
    # transformers 5.23's continuous batching applies temperature, top-k and top-p per request; it drops the
    # repetition penalty and does not declare min-p supported (generation/continuous_batching/cb_logits_processors.py).
    RolloutBackend("continuous_batching", "transformers continuous batching, paged KV cache", {
        "use_vllm": False, "use_transformers_continuous_batching": True}, unsupported_sampling=("min_p",
                                                                                                "repetition_penalty")),
    RolloutBackend("vllm_colocate", "vLLM inside each training process, sharing its GPU", {
        "use_vllm": True, "vllm_mode": "colocate", "use_transformers_continuous_batching": False},
        needs_cuda=True, package="vllm"),
    RolloutBackend("vllm_server", "vLLM in a separate `trl vllm-serve` process", {
        "use_vllm": True, "vllm_mode": "server", "use_transformers_continuous_batching": False},
        needs_cuda=True, package="vllm"),
)}


def backend(name: str) -> RolloutBackend:
    if name not in BACKENDS:
        raise ValueError(f"rollout_backend must be one of {tuple(BACKENDS)}, got {name!r}")
    return BACKENDS[name]


def _neutral(option: str, value: Any) -> bool:
    return value is None or value == SAMPLING_NEUTRAL[option]


def apply(args) -> None:
    """Check that `args` (a BookGRPOConfig) can use its rollout_backend, then set TRL's options for it.

    Raises ValueError with a one-line fix; runs before GRPOConfig's own checks and before anything loads."""
    chosen = backend(args.rollout_backend)
    for option, value in chosen.trl_options.items():
        current = getattr(args, option)
        default = TRL_DEFAULTS.get(option)
        if current != value and current != default:
            raise ValueError(f"{option} {current!r} contradicts rollout_backend {chosen.name!r}: choose the engine "
                             f"with rollout_backend alone (one of {tuple(BACKENDS)}) and remove {option}")
    if chosen.trl_options.get("cache_implementation") != "static" and args.cache_implementation == "static":
        raise ValueError(f"cache_implementation 'static' is rollout_backend 'static_cache'; with rollout_backend "
                         f"{chosen.name!r} remove cache_implementation")
    unsupported = [f"{o} {getattr(args, o)!r}" for o in chosen.unsupported_sampling
                   if not _neutral(o, getattr(args, o))]
    for option in chosen.unsupported_sampling:  # generation_kwargs may carry them too
        if option in (args.generation_kwargs or {}) and not _neutral(option, args.generation_kwargs[option]):
            unsupported.append(f"generation_kwargs.{option}")
    if unsupported:
        raise ValueError(f"rollout_backend {chosen.name!r} cannot apply {', '.join(unsupported)} (it applies "
                         "temperature, top_p and top_k): use rollout_backend hf or static_cache, or drop the setting")
    if chosen.trl_options.get("use_vllm") and args.off_policy_mask_threshold is not None \
            and not args.logprobs_at_sampling_temperature:
        raise ValueError("off_policy_mask_threshold compares vLLM's log-probs (at the sampling temperature) with ours "
                         "(at temperature 1, the book's): set logprobs_at_sampling_temperature true or remove it")
    for option, value in chosen.trl_options.items():
        setattr(args, option, value)


def environment_problem(name: str, *, dtype: str | None = None, bf16: bool = False, load_in_8bit: bool = False,
                        cuda_available: Callable[[], bool] | None = None) -> str | None:
    """What stops backend `name` on this machine or with these model settings (None: nothing).

    Checked by the runner before any model loads (rlhf_recipes/validation.py)."""
    chosen = backend(name)
    if chosen.package and importlib.util.find_spec(chosen.package) is None:
        return (f"needs the package `{chosen.package}`, which is not installed. Install it on a CUDA machine with "
                f'pip install "rlhf-recipes[{chosen.package}]", or use rollout_backend hf')
    if chosen.needs_cuda:
        if cuda_available is None:
            import torch

            cuda_available = torch.cuda.is_available
        if not cuda_available():
            return f"{chosen.summary} needs a CUDA GPU, and this machine has none; use rollout_backend hf"
    if chosen.trl_options.get("use_vllm") and load_in_8bit:
        return "vLLM cannot load 8-bit (load_in_8bit) weights; use load_in_4bit or rollout_backend hf"
    if chosen.trl_options.get("use_transformers_continuous_batching") and bf16 and dtype not in ("bfloat16", "auto"):
        # TRL casts the policy itself to bf16 before each continuous-batching generation, which would
        # silently turn fp32 master weights into bf16 ones.
        return (f"continuous_batching casts the policy to bf16 in place (TRL), which would drop dtype {dtype!r} "
                "weights to bf16: set dtype bfloat16, or use rollout_backend hf or static_cache")
    return None
