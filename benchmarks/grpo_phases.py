#!/usr/bin/env python
"""Throughput and peak memory of GRPO rollout batches (a benchmark, not a test).

    python -m benchmarks.grpo_phases --profile tiny          # CPU: the embedded tiny model
    python -m benchmarks.grpo_phases --random-qwen3-1.7b     # GPU: random weights, Qwen3-1.7B architecture,
                                                             #      the book's settings (bf16, 4 x 8 rollouts,
                                                             #      512 new tokens, micro-batch 2 x 4)
    python -m benchmarks.grpo_phases --random-qwen3-1.7b --backends hf,static_cache,continuous_batching,vllm_colocate

It runs recipes/grpo.yaml through BookGRPOTrainer for `--batches` rollout batches (one
batch = generation + scoring + 4 optimizer steps) and prints, for the last batch:
  generation  completion tokens / seconds in model.generate (HF generate, no vLLM)
  scoring     prompt+completion tokens / seconds of the rest of the rollout step (old
              log-probs at rollout time, reward functions, advantages)
  training    prompt+completion tokens / seconds of forward + backward over the micro-batches
  peak memory torch.cuda.max_memory_allocated on GPU; the process's peak RSS on CPU
With --backends, the same rollout batches once per rollout backend (rollout_backend, in one process,
each from the same initial weights), and a table of generated tokens/s, step time, peak memory, the
mean reward and each backend's ratio to hf measured in the same run (hf is measured first when absent).
No weights are downloaded: the 1.7B model is built from its published config with random
weights, so completions run to the 512-token budget (the worst case of the book's runs).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from rlhf_recipes.errors import RecipeError
from rlhf_recipes.paths import recipe_path


# Qwen/Qwen3-1.7B's config.json (architecture only).
QWEN3_1_7B = dict(
    vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16,
    num_key_value_heads=8, head_dim=128, max_position_embeddings=40960, rope_theta=1000000.0, rms_norm_eps=1e-6,
    tie_word_embeddings=True, hidden_act="silu", attention_bias=False,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", choices=["tiny"], help="CPU benchmark on the tiny model")
    parser.add_argument("--random-qwen3-1.7b", dest="qwen", action="store_true",
                        help="random weights of the Qwen3-1.7B architecture (needs a GPU)")
    parser.add_argument("--recipe", default=str(recipe_path("grpo")))
    parser.add_argument("--batches", type=int, default=2, help="rollout batches to run; the last is reported")
    parser.add_argument("--backends", help="comma-separated rollout backends to compare (rollout_backend), e.g. "
                        "hf,static_cache,continuous_batching; hf is added first when missing")
    parser.add_argument("--json", help="also write the numbers to this file")
    args, extra = parser.parse_known_args(argv)
    if bool(args.profile) == args.qwen:
        parser.error("choose exactly one of --profile tiny and --random-qwen3-1.7b")
    backends = None
    if args.backends:
        from custom_losses.policy_gradient.rollout_backends import BACKENDS

        backends = [b for b in args.backends.split(",") if b]
        unknown = [b for b in backends if b not in BACKENDS]
        if unknown:
            parser.error(f"--backends: unknown {', '.join(unknown)}; choose from {', '.join(BACKENDS)}")
        backends = ["hf"] * ("hf" not in backends) + backends

    import torch

    if args.qwen and not torch.cuda.is_available():
        parser.error("--random-qwen3-1.7b needs a CUDA GPU (about 20 GB at the book's settings)")
    if backends is None:
        try:
            report = measure(args, extra)
        except RecipeError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        width = max(map(len, report))
        print("\nGRPO rollout batch (the last of %d):" % args.batches)
        for key, value in report.items():
            print(f"  {key:<{width}}  {value}")
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
        return 0

    reports = []
    for name in backends:
        try:
            reports.append(measure(args, [*extra, "--rollout_backend", name]))
        except RecipeError as e:  # this machine cannot run it (no vLLM, no GPU): say so, measure the others
            print(f"skip {name}: {e}", file=sys.stderr)
            if name == "hf":  # the baseline itself cannot run: the recipe or a flag is wrong
                print(f"error: {e}", file=sys.stderr)
                return 2
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    base = reports[0]
    for r in reports:
        r["generation_vs_hf"] = round(r["generation_tokens_per_s"] / max(base["generation_tokens_per_s"], 1e-9), 2)
        r["step_speedup_vs_hf"] = round(base["step_seconds"] / max(r["step_seconds"], 1e-9), 2)
        r["peak_vs_hf"] = round(r["peak_memory_gib"] / max(base["peak_memory_gib"], 1e-9), 2)
    _print_backends(reports, args.batches)
    if args.json:
        Path(args.json).write_text(json.dumps(reports, indent=2) + "\n")
    return 0


def measure(args, extra: list[str]) -> dict:
    """Run `args.batches` rollout batches of the recipe with the extra command-line options; the last one's numbers."""
    import torch

    from rlhf_recipes.config import load_recipe
    from rlhf_recipes.data import load_splits
    from rlhf_recipes.families.policy_gradient import reward_funcs
    from rlhf_recipes.models import load_causal_lm, load_tokenizer
    from rlhf_recipes.registry import import_object
    from rlhf_recipes.validation import check_rollout_backend

    cuda = torch.cuda.is_available()
    out = tempfile.mkdtemp(prefix="benchmark-grpo-")
    argv = [args.recipe, "--output_dir", out, "--report_to", "none", "--save_strategy", "no", "--rollouts_db", "null",
            "--log_samples_every", "0", "--logging_steps", "1000"]
    if args.profile:
        argv += ["--profile", "tiny"]
    else:
        argv += ["--model_name_or_path", "tiny"]  # only the tokenizer: the model is built below
    recipe = load_recipe(argv + extra)
    check_rollout_backend(recipe)
    steps_per_batch = recipe.training.generation_batch_size // (
        recipe.training.per_device_train_batch_size * recipe.training.gradient_accumulation_steps * recipe.world_size
    )
    recipe.training.max_steps = steps_per_batch * args.batches

    tokenizer = load_tokenizer(recipe.model)
    train, _ = load_splits(recipe)
    torch.manual_seed(0)  # every backend starts from the same weights
    if args.qwen:
        from transformers import Qwen3Config, Qwen3ForCausalLM

        config = Qwen3Config(**QWEN3_1_7B, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
        with torch.device("cuda"):
            model = Qwen3ForCausalLM(config).to(torch.bfloat16)
        model.generation_config.eos_token_id = tokenizer.eos_token_id
        model.generation_config.pad_token_id = tokenizer.pad_token_id
        if recipe.training.use_vllm:  # vLLM loads the model by path: save the random weights for it
            model.save_pretrained(out + "/model")
            tokenizer.save_pretrained(out + "/model")
            model.name_or_path = model.config._name_or_path = out + "/model"
    else:
        model = load_causal_lm(recipe.model)

    trainer_class = import_object(recipe.algorithm.trainer_class)
    trainer = trainer_class(model=model, reward_funcs=reward_funcs(recipe.training), args=recipe.training,
                            train_dataset=train, processing_class=tokenizer)

    timers, counts = defaultdict(float), defaultdict(int)
    rewards_seen: list[float] = []

    def sync():
        if cuda:
            torch.cuda.synchronize()

    def timed(name, fn, count=None):
        def wrapper(*a, **k):
            sync()
            start = time.perf_counter()
            result = fn(*a, **k)
            sync()
            timers[name] += time.perf_counter() - start
            if count:
                count(result, *a, **k)
            return result
        return wrapper

    def on_rollout_start(*a, **k):  # reset at each rollout batch, so the last one is reported
        timers.clear()
        counts.clear()
        rewards_seen.clear()
        if cuda:
            torch.cuda.reset_peak_memory_stats()

    generate_and_score = trainer._generate_and_score_completions

    def rollout(*a, **k):
        on_rollout_start()
        result = timed("rollout", generate_and_score, lambda r, *a, **k: counts.__setitem__(
            "rollout_tokens", int(r["prompt_mask"].sum() + r["completion_mask"].sum())))(*a, **k)
        per_func = trainer._last_rewards_per_func
        if per_func is not None:
            rewards_seen.extend((per_func * trainer.reward_weights.to(per_func.device)).nansum(dim=1).tolist())
        return result

    trainer._generate_and_score_completions = rollout
    def count_generated(result, *a, **k):
        counts["generated_tokens"] += sum(len(c) for c in result[0])

    trainer._generate_single_turn = timed("generate", trainer._generate_single_turn, count_generated)
    trainer.training_step = timed("training_step", trainer.training_step, lambda r, model, inputs, *a, **k: None)
    compute_loss = trainer.compute_loss

    def counting_loss(model, inputs, *a, **k):
        counts["trained_tokens"] += int(inputs["prompt_mask"].sum() + inputs["completion_mask"].sum())
        return compute_loss(model, inputs, *a, **k)

    trainer.compute_loss = counting_loss
    wall = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - wall

    train_seconds = timers["training_step"] - timers["rollout"]
    score_seconds = timers["rollout"] - timers["generate"]
    peak = (torch.cuda.max_memory_allocated() / 2**30 if cuda
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)
    report = {
        "rollout_backend": recipe.training.rollout_backend,
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "model": "Qwen3-1.7B architecture, random weights, bf16" if args.qwen else "tiny (2-layer Qwen3), fp32",
        "rollout_batch": f"{recipe.training.generation_batch_size // recipe.training.num_generations} prompts x "
                         f"{recipe.training.num_generations} rollouts, {steps_per_batch} optimizer steps",
        "max_completion_length": recipe.training.max_completion_length,
        "generated_tokens": counts["generated_tokens"],
        "generation_seconds": round(timers["generate"], 3),
        "generation_tokens_per_s": round(counts["generated_tokens"] / max(timers["generate"], 1e-9), 1),
        "scoring_tokens_per_s": round(counts["rollout_tokens"] / max(score_seconds, 1e-9), 1),
        "trained_tokens": counts["trained_tokens"],
        "training_seconds": round(train_seconds, 3),
        "training_tokens_per_s": round(counts["trained_tokens"] / max(train_seconds, 1e-9), 1),
        "step_seconds": round(timers["training_step"] / steps_per_batch, 3),  # generation amortized
        "mean_reward": round(sum(rewards_seen) / len(rewards_seen), 4) if rewards_seen else None,
        "peak_memory_gib": round(peak, 3),
        "peak_memory_kind": "torch.cuda.max_memory_allocated" if cuda else "process peak RSS (all runs so far)",
        "wall_seconds_all_batches": round(wall, 2),
    }
    del trainer, model
    return report


def _print_backends(reports: list[dict], batches: int) -> None:
    from rich.console import Console
    from rich.table import Table

    first = reports[0]
    table = Table(title=f"GRPO rollout backends, the last of {batches} rollout batches ({first['model']}, "
                        f"{first['rollout_batch']}, {first['max_completion_length']} new tokens, {first['device']})")
    columns = ("rollout_backend", "generation_tokens_per_s", "generation_vs_hf", "step_seconds", "step_speedup_vs_hf",
               "peak_memory_gib", "peak_vs_hf", "mean_reward")
    for col in columns:
        table.add_column(col)
    for r in reports:
        table.add_row(*(str(r[c]) for c in columns))
    Console(width=160).print(table)
    if first["device"] == "cpu":
        print("CPU peak memory is the process's peak RSS, which only grows: compare backends' peaks on a GPU.")


if __name__ == "__main__":
    sys.exit(main())
