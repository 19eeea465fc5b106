#!/usr/bin/env python
"""Throughput and peak memory of GRPO rollout batches (a benchmark, not a test).

    rlhf-recipes bench-phases --profile tiny          # CPU: the embedded tiny model
    rlhf-recipes bench-phases --random-qwen3-1.7b     # GPU: random weights, Qwen3-1.7B architecture,
                                                             #      the book's settings (bf16, 4 x 8 rollouts,
                                                             #      512 new tokens, micro-batch 2 x 4)

It runs recipes/grpo.yaml through BookGRPOTrainer for `--batches` rollout batches (one
batch = generation + scoring + 4 optimizer steps) and prints, for the last batch:
  generation  completion tokens / seconds in model.generate (HF generate, no vLLM)
  scoring     prompt+completion tokens / seconds of the rest of the rollout step (old
              log-probs at rollout time, reward functions, advantages)
  training    prompt+completion tokens / seconds of forward + backward over the micro-batches
  peak memory torch.cuda.max_memory_allocated on GPU; the process's peak RSS on CPU
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
    parser.add_argument("--json", help="also write the numbers to this file")
    args, extra = parser.parse_known_args()
    if bool(args.profile) == args.qwen:
        parser.error("choose exactly one of --profile tiny and --random-qwen3-1.7b")

    import torch

    from rlhf_recipes.config import load_recipe
    from rlhf_recipes.data import load_splits
    from rlhf_recipes.families.policy_gradient import reward_funcs
    from rlhf_recipes.models import load_causal_lm, load_tokenizer
    from rlhf_recipes.registry import import_object

    cuda = torch.cuda.is_available()
    if args.qwen and not cuda:
        parser.error("--random-qwen3-1.7b needs a CUDA GPU (about 20 GB at the book's settings)")
    out = tempfile.mkdtemp(prefix="benchmark-grpo-")
    argv = [args.recipe, "--output_dir", out, "--report_to", "none", "--save_strategy", "no", "--rollouts_db", "null",
            "--log_samples_every", "0", "--logging_steps", "1000"]
    if args.profile:
        argv += ["--profile", "tiny"]
    else:
        argv += ["--model_name_or_path", "tiny"]  # only the tokenizer: the model is built below
    recipe = load_recipe(argv + extra)
    steps_per_batch = recipe.training.generation_batch_size // (
        recipe.training.per_device_train_batch_size * recipe.training.gradient_accumulation_steps * recipe.world_size
    )
    recipe.training.max_steps = steps_per_batch * args.batches

    tokenizer = load_tokenizer(recipe.model)
    train, _ = load_splits(recipe)
    if args.qwen:
        from transformers import Qwen3Config, Qwen3ForCausalLM

        torch.manual_seed(0)
        config = Qwen3Config(**QWEN3_1_7B, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
        with torch.device("cuda"):
            model = Qwen3ForCausalLM(config).to(torch.bfloat16)
        model.generation_config.eos_token_id = tokenizer.eos_token_id
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    else:
        model = load_causal_lm(recipe.model)

    trainer_class = import_object(recipe.algorithm.trainer_class)
    trainer = trainer_class(model=model, reward_funcs=reward_funcs(recipe.training), args=recipe.training,
                            train_dataset=train, processing_class=tokenizer)

    timers, counts = defaultdict(float), defaultdict(int)

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
        if cuda:
            torch.cuda.reset_peak_memory_stats()

    generate_and_score = trainer._generate_and_score_completions

    def rollout(*a, **k):
        on_rollout_start()
        return timed("rollout", generate_and_score, lambda r, *a, **k: counts.__setitem__(
            "rollout_tokens", int(r["prompt_mask"].sum() + r["completion_mask"].sum())))(*a, **k)

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
        "peak_memory_gib": round(peak, 3),
        "peak_memory_kind": "torch.cuda.max_memory_allocated" if cuda else "process peak RSS",
        "wall_seconds_all_batches": round(wall, 2),
    }
    width = max(map(len, report))
    print("\nGRPO rollout batch (the last of %d):" % args.batches)
    for key, value in report.items():
        print(f"  {key:<{width}}  {value}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
