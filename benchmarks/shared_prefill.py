#!/usr/bin/env python
"""One prefill per prompt against one per rollout: `generate` on a rollout batch (a benchmark, not a test).

    python -m benchmarks.shared_prefill                      # the nano base, the nano GRPO batch: 16 prompts x 8
    python -m benchmarks.shared_prefill --model tiny --prompts 4 --generations 8 --repeats 3

A rollout batch repeats each prompt `--generations` times, as GRPOTrainer builds it. The same seeded `generate`
runs in turns with and without custom_losses/policy_gradient/shared_prefill.py; printed: the median seconds of
each, their ratio, the prefill alone (one forward over every row against one over the distinct rows), and whether
the sampled tokens are the same (they must be: the module promises it).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="nano", help="nano, tiny or a model folder (default: nano)")
    parser.add_argument("--recipe", default="recipes/grpo.yaml", help="its nano prompts are sampled from")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--generations", type=int, default=8, help="rollouts per prompt")
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=5, help="timed runs of each (after one untimed)")
    args = parser.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    from custom_losses.policy_gradient.shared_prefill import prefill_once_per_prompt
    from rlhf_recipes.config import load_recipe
    from rlhf_recipes.data import load_splits
    from rlhf_recipes.models import resolve_model_path

    path = resolve_model_path(args.model)
    model, tokenizer = AutoModelForCausalLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"
    prompts = load_splits(load_recipe([args.recipe, "--profile", "nano", "--num_samples", str(args.prompts)]))[0]
    texts = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in prompts["prompt"]]
    batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    ids = batch["input_ids"].repeat_interleave(args.generations, 0)
    mask = batch["attention_mask"].repeat_interleave(args.generations, 0)
    config = GenerationConfig(max_new_tokens=args.max_new_tokens, do_sample=True, temperature=0.6, top_p=0.95,
                              top_k=20, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)

    def sample(shared: bool):
        torch.manual_seed(0)
        with torch.no_grad(), prefill_once_per_prompt(model) if shared else contextlib.nullcontext():
            start = time.perf_counter()
            out = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
            return out, time.perf_counter() - start

    def forward(rows_ids, rows_mask) -> float:
        with torch.no_grad():
            start = time.perf_counter()
            model(input_ids=rows_ids, attention_mask=rows_mask)
            return time.perf_counter() - start

    same = torch.equal(sample(False)[0], sample(True)[0])  # also the untimed warm-up
    full, shared, prefill_all, prefill_distinct = [], [], [], []
    for _ in range(args.repeats):  # in turns, so that a drifting machine slows both alike
        full.append(sample(False)[1])
        shared.append(sample(True)[1])
        prefill_all.append(forward(ids, mask))
        prefill_distinct.append(forward(batch["input_ids"], batch["attention_mask"]))
    med = statistics.median
    print(f"model {args.model} ({path}), {args.prompts} prompts x {args.generations} rollouts, prompt "
          f"{ids.shape[1]} tokens (padded), {args.max_new_tokens} new tokens, {torch.get_num_threads()} threads, "
          f"median of {args.repeats}")
    print(f"generate, one prefill per rollout  {med(full) * 1000:8.1f} ms")
    print(f"generate, one prefill per prompt   {med(shared) * 1000:8.1f} ms   ratio {med(shared) / med(full):.2f}")
    print(f"prefill alone: {ids.shape[0]} rows {med(prefill_all) * 1000:.1f} ms, {len(texts)} rows "
          f"{med(prefill_distinct) * 1000:.1f} ms")
    print(f"same tokens: {'yes' if same else 'NO'}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
