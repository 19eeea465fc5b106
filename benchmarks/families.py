#!/usr/bin/env python
"""Step benchmark per recipe family: tokens/s, step time, peak memory, MFU, and the planner's prediction.

    python -m benchmarks.families                       # GPU: the book's model for each family, random weights
    python -m benchmarks.families --models all --lora off,on --attention sdpa,flash_attention_2
    python -m benchmarks.families --tiny                # CPU: the embedded tiny model (a smoke run of this script)
    python -m benchmarks.families --algorithms grpo,ppo --lora off --backends hf,static_cache,continuous_batching,vllm_colocate
    python -m benchmarks.families --algorithms dpo --lora off -- --activation_checkpointing false --per_device_train_batch_size 16
                                             # anything after `--` is a recipe option, as on recipes/run.py

For each (algorithm, model, LoRA, attention) it builds the model's architecture from its shipped
config.json with random weights (no download), saves it next to the tiny tokenizer, and runs the
recipe through recipes/run.py's own pipeline (data, family, trainer) for --warmup + --steps
optimizer steps, one micro-batch per step (effective batch = micro-batch; policy gradients keep
their rollout structure). Sequences come from a synthetic file in the dataset's schema, long
enough to fill --seq-len tokens (policy gradients: reasoning-gym prompts, completions at the
max_completion_length budget, which random weights always reach).

Reported per configuration (the steps after warmup):
  step_s           wall seconds per optimizer step (policy gradients: generation amortized)
  tokens_per_s     trained tokens (non-padding, every forward with gradients) per second
  peak_gib         torch.cuda.max_memory_allocated (reserved in parentheses); on CPU, live tensor bytes
  planned_gib      the planner's peak for the same micro-batch shape (`rlhf-recipes plan`)
  mfu              model FLOPs / s over the GPU's dense bf16 peak: 6 N per trained token (4 N + the
                   adapters with LoRA), 2 N per reference / rollout-scoring / generated token, the value
                   model's own 6 N in PPO, + causal attention 6 L a d s per trained token; N counts the
                   decoder linears and the output head (embedding lookups are free)
With --backends, each policy-gradient configuration runs once per rollout backend (rollout_backend);
each row then also has generation_vs_hf, step_speedup_vs_hf and peak_vs_hf against the hf row of the
same configuration in the same run. Backends this machine cannot run are skipped with the reason.
The GRPO rollout phases (generation, scoring, training) are split by `python -m benchmarks.grpo_phases`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from rlhf_recipes.paths import recipe_path

ARCHITECTURES = {"qwen3-0.6b": "Qwen/Qwen3-0.6B", "qwen3-1.7b": "Qwen/Qwen3-1.7B", "olmo2-1b": "allenai/OLMo-2-0425-1B"}
BENCH_SEQ_LEN = 1024  # tokens per sequence by default, or the recipe's max_length when shorter
# Dense bf16 tensor-core peaks (TFLOP/s), by a substring of torch.cuda.get_device_name().
PEAK_TFLOPS = {"A6000": 154.8, "A100": 312.0, "H100 PCIe": 756.0, "H100": 989.0, "H200": 989.0, "L40S": 362.0,
               "A10": 125.0, "4090": 165.2}


def peak_tflops(name: str) -> float | None:
    for key in sorted(PEAK_TFLOPS, key=len, reverse=True):
        if key in name:
            return PEAK_TFLOPS[key]
    return None


# ---------------------------------------------------------------------------------------
# Inputs: a random-weight model of the real architecture, and synthetic data of a known length


def build_random_model(arch: str, root: Path, tokenizer) -> Path:
    """config.json of the architecture (shipped shape) + random bf16 weights + the tiny tokenizer, saved."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from rlhf_recipes.tools.planner.shapes import load_config

    target = root / arch
    if (target / "config.json").exists():
        return target
    config, _ = load_config(ARCHITECTURES[arch])
    config = {k: v for k, v in config.items() if k != "_name_or_path"}
    config.update(pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=None)
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config), dtype=torch.bfloat16)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
    del model
    return target


def book_architecture(algorithm: str) -> str:
    """The architecture (a key of ARCHITECTURES) of the model the algorithm's recipe names: the book's model.
    Base and fine-tuned checkpoints of one architecture share it (Qwen/Qwen3-0.6B-Base -> qwen3-0.6b)."""
    from rlhf_recipes.config import read_yaml

    named = str(read_yaml(str(recipe_path(algorithm))).get("model_name_or_path", ""))
    matches = [arch for arch, hub_id in ARCHITECTURES.items() if named == hub_id or named.startswith(hub_id + "-")]
    if not matches:
        raise SystemExit(f"{recipe_path(algorithm)} names {named!r}, not one of the shipped architectures "
                         f"({', '.join(ARCHITECTURES.values())}); pass --models")
    return max(matches, key=lambda arch: len(ARCHITECTURES[arch]))


def _words(tokenizer, n_tokens: int, rng: random.Random) -> str:
    vocab = ["the", "answer", "model", "because", "first", "then", "number", "value", "step", "result", "so",
             "which", "between", "reward", "policy", "gradient", "example", "question", "explain", "simple"]
    words = []
    while len(tokenizer(" ".join(words))["input_ids"]) < n_tokens:
        words.extend(rng.choice(vocab) for _ in range(max(1, (n_tokens - len(words)) // 2)))
    return " ".join(words)


def synthetic_data(columns: tuple[str, ...], path: Path, tokenizer, seq_len: int, rows: int) -> Path:
    """Rows in the dataset's real schema (its adapter's `columns`) whose prompt + response fill about seq_len
    tokens: conversations (SFT), problems with answers (GSM8K), rollouts with rewards (an outcome reward model),
    or preference pairs."""
    rng = random.Random(0)
    prompt_len = seq_len // 4
    lines = []
    for i in range(rows):
        prompt = _words(tokenizer, prompt_len, rng)
        if "messages" in columns:
            reply = _words(tokenizer, seq_len - prompt_len, rng)
            lines.append({"prompt": prompt, "prompt_id": str(i), "category": "Generation",
                          "messages": [{"role": "user", "content": prompt}, {"role": "assistant", "content": reply}]})
        elif "question" in columns:  # GSM8K-style problems (rejection sampling generates its own completions)
            lines.append({"question": prompt, "answer": _words(tokenizer, prompt_len, rng) + "\n#### 7"})
        elif "completions" in columns:
            # The ORM skips over-long rollouts (as the book does): leave room for its system prompt and template.
            budget = max(16, seq_len - prompt_len - 160)
            completions = [_words(tokenizer, budget, rng) + "\n#### 7" for _ in range(2)]
            lines.append({"prompt": prompt, "completions": completions, "rewards": [1.0, 0.0]})
        else:
            responses = [_words(tokenizer, seq_len - prompt_len, rng) for _ in range(2)]
            lines.append({"prompt": prompt, "chosen": [{"role": "user", "content": prompt},
                                                       {"role": "assistant", "content": responses[0]}],
                          "rejected": [{"role": "user", "content": prompt},
                                       {"role": "assistant", "content": responses[1]}],
                          "chosen-rating": 5.0, "rejected-rating": 1.0, "source": "synthetic"})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


# ---------------------------------------------------------------------------------------
# One configuration


def flops_per_trained_token(shape, lora_params: int, lora: bool, seq_len: int, labels: int | None) -> float:
    """6 N (forward 2 N + backward 4 N), or with LoRA 4 N + 6 N_lora (no weight gradients for the base),
    + causal attention 6 L a d s."""
    n = shape.decoder_linear_params() + (shape.vocab * shape.hidden if labels is None else shape.hidden * labels)
    attention = 6 * shape.layers * shape.heads * shape.head_dim * seq_len
    return (4 * n + 6 * lora_params if lora else 6 * n) + attention


def run_benchmark(algorithm: str, model: str | None = None, steps: int = 3, warmup: int = 1, lora: bool | str = False,
                  attention: str = "sdpa", seq_len: int | None = None, tiny: bool = False,
                  workdir: Path | None = None, peak: float | None = None, backend: str = "hf",
                  recipe_options: list[str] | None = None) -> dict:
    import torch
    from transformers import TrainerCallback

    from rlhf_recipes.config import load_recipe
    from rlhf_recipes.config_schema import fields_of
    from rlhf_recipes.data import SOURCES, load_splits
    from rlhf_recipes.models import load_tokenizer
    from rlhf_recipes.tools.planner import Workload
    from rlhf_recipes.tools.planner import memory as M
    from benchmarks.tensor_memory import TensorMemoryTracker
    from rlhf_recipes.registry import ALGORITHMS, family_of
    from rlhf_recipes.tiny import tiny_model_path
    from rlhf_recipes.tools.planner.family_shapes import GENERATES_ROLLOUTS, scoring_head

    cuda = torch.cuda.is_available()
    if not cuda and not tiny:
        raise SystemExit("real model shapes need a CUDA GPU; use --tiny for a CPU run of the tiny model")
    workdir = Path(workdir or tempfile.mkdtemp(prefix="rlhf-bench-"))
    pg = ALGORITHMS[algorithm].family in GENERATES_ROLLOUTS  # rollout batches; generation timed apart
    tok_path = tiny_model_path()
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tok_path)
    arch = "tiny" if tiny else (model or book_architecture(algorithm))
    model_path = tok_path if tiny else str(build_random_model(arch, workdir / "models", tokenizer))
    total_steps = warmup + steps
    argv = [str(recipe_path(algorithm)), "--model_name_or_path", model_path,
            "--output_dir", str(workdir / f"run-{algorithm}-{arch}-{lora}-{attention}-{backend}"), "--overwrite",
            "--report_to", "none", "--save_strategy", "no", "--logging_steps", "1", "--eval_strategy", "no",
            "--attn_implementation", attention, "--dataloader_num_workers", "0"]
    if tiny:
        argv += ["--profile", "tiny", "--model_name_or_path", "tiny"]
    else:
        argv += ["--bf16", "true", "--dtype", "bfloat16"]
    argv += recipe_options or []  # the user's recipe options (after `--`): before the benchmark's own bookkeeping
    if lora:
        argv += ["--use_peft", "true"]
    if lora == "qlora":
        argv += ["--load_in_4bit", "true"]
    if pg:
        options = fields_of(ALGORITHMS[algorithm].config_class)  # no rollout store or samples where the config has them
        argv += [x for key, value in (("rollouts_db", "null"), ("log_samples_every", "0")) if key in options
                 for x in (f"--{key}", value)]
        if "rollout_backend" in options:
            argv += ["--rollout_backend", backend]
        probe = load_recipe(argv)
        from rlhf_recipes.validation import check_rollout_backend

        check_rollout_backend(probe)  # a RecipeError: this machine cannot run the backend
        per_rollout = probe.training.generation_batch_size // (
            probe.training.per_device_train_batch_size * probe.training.gradient_accumulation_steps)
        total_steps = per_rollout * (1 + max(1, steps // per_rollout))  # whole rollout batches, the first one warms up
        warmup = per_rollout
        argv += ["--max_steps", str(total_steps), "--num_samples", str(4 * total_steps * 8)]
    else:
        probe = load_recipe(argv)
        micro = probe.training.per_device_train_batch_size
        seq_len = seq_len or (probe.training.max_length if tiny else min(probe.training.max_length, BENCH_SEQ_LEN))
        rows = total_steps * micro + 8
        data = synthetic_data(SOURCES[probe.args.dataset].columns, workdir / f"data-{algorithm}-{seq_len}.jsonl", tokenizer, seq_len, rows)
        argv += ["--max_steps", str(total_steps), "--effective_batch_size", str(micro), "--data_files", str(data),
                 "--num_samples", str(rows), "--eval_fraction", "0.0", "--max_length", str(seq_len)]
    recipe = load_recipe(argv)
    tokenizer = load_tokenizer(recipe.model)
    train, _ = load_splits(recipe)
    fam = family_of(recipe.algorithm)
    net = fam.load_model(recipe, tokenizer)
    trainer = fam.build_trainer(recipe, net, tokenizer, train, None, [])

    counts = {"trained": 0, "scored": 0, "generated": 0, "shapes": []}
    timing = {"generate": 0.0, "generating": False}
    tracker = None if cuda else TensorMemoryTracker()

    def sync():
        if cuda:
            torch.cuda.synchronize()

    def count_tokens(module, args, kwargs):
        mask = kwargs.get("attention_mask")
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None or timing["generating"]:  # generated tokens are counted once each, below
            return
        real = int(mask.sum()) if mask is not None else ids.numel()
        if torch.is_grad_enabled():
            counts["trained"] += real
            counts["shapes"].append(tuple(ids.shape))
            counts["padded"] = counts.get("padded", False) or (mask is not None and real < ids.numel())
        else:
            counts["scored"] += real

    # The policy's forwards, and a separate reference model's (DPO's reference log-probs: 2 N per token, no grad).
    for held in (trainer.model, getattr(trainer, "ref_model", None)):
        if held is not None:
            backbone = held.get_base_model() if hasattr(held, "get_base_model") else held
            backbone.base_model.register_forward_pre_hook(count_tokens, with_kwargs=True)
    if hasattr(trainer, "_generate_single_turn"):
        original = trainer._generate_single_turn

        def generate(*a, **k):
            sync()
            start = time.perf_counter()
            timing["generating"] = True
            try:
                out = original(*a, **k)
            finally:
                timing["generating"] = False
            sync()
            timing["generate"] += time.perf_counter() - start
            counts["generated"] += sum(len(c) for c in out[0])
            return out

        trainer._generate_single_turn = generate

    class Clock(TrainerCallback):
        def __init__(self):
            self.start = None
            self.marks = {}

        def on_step_end(self, args, state, control, **kwargs):
            sync()
            if state.global_step == warmup:  # measurement starts after the warmup steps
                self.start = time.perf_counter()
                self.marks = dict(counts, shapes=None, generate=timing["generate"])
                if cuda:
                    torch.cuda.reset_peak_memory_stats()
                elif tracker is not None:
                    tracker.reset_peak()

    clock = Clock()
    trainer.add_callback(clock)
    if tracker is not None:
        for held in (trainer.model, getattr(trainer, "ref_model", None), getattr(trainer, "value_model", None)):
            if held is not None:
                tracker.track(held)
        with tracker:
            trainer.train()
    else:
        trainer.train()
    sync()
    wall = time.perf_counter() - clock.start
    measured_steps = trainer.state.global_step - warmup
    trained = counts["trained"] - clock.marks["trained"]
    scored = counts["scored"] - clock.marks["scored"]
    generated = counts["generated"] - clock.marks["generated"]
    gen_seconds = timing["generate"] - clock.marks["generate"]
    peak_bytes = torch.cuda.max_memory_allocated() if cuda else tracker.peak
    reserved = torch.cuda.max_memory_reserved() if cuda else None

    # The planner's prediction for the micro-batch shapes seen, by the same path as a recorded row's.
    n, s = max(x[0] for x in counts["shapes"]), max(x[1] for x in counts["shapes"])
    training = recipe.training
    padded = counts.get("padded", False)
    if pg:
        completion = training.max_completion_length
        workload = Workload(n, s, padded=padded, generation_sequences=training.generation_batch_size,
                            prompt_len=s - completion, completion_len=completion)
    else:
        workload = Workload(n, s, padded=padded)
    plan_inputs = {"recipe_args": _plan_args(argv[1:]), "workload": dataclasses.asdict(workload)}
    plan = replan({"algorithm": algorithm, "model": arch, "plan_inputs": plan_inputs}, device="cuda" if cuda else "cpu")
    shape = plan.shape

    score_head = scoring_head(recipe)  # a reward model's head: (labels, bias); None: the LM head
    labels = None if score_head is None else score_head[0]
    lora_n = M.lora_params(shape, recipe.model.lora_r, recipe.model.lora_target_modules) if lora else 0
    per_token = flops_per_trained_token(shape, lora_n, lora, s, labels)
    head = shape.vocab * shape.hidden if labels is None else shape.hidden
    forward_only = 2 * (shape.decoder_linear_params() + head)
    flops = trained * per_token + (scored + generated) * forward_only
    if getattr(type(trainer), "needs_value_model", False) and not getattr(training, "share_value_backbone", False):
        flops += trained * 6 * shape.decoder_linear_params()  # the value model's own forward + backward
    peak_flops = (peak or (peak_tflops(torch.cuda.get_device_name()) if cuda else None))
    return {
        "algorithm": algorithm,
        "model": arch,
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "lora": lora,
        "attention": attention,
        "rollout_backend": backend if "rollout_backend" in fields_of(ALGORITHMS[algorithm].config_class) else None,
        "micro_batch": f"{n} x {s}",
        "steps_measured": measured_steps,
        "step_s": round(wall / max(measured_steps, 1), 4),
        "tokens_per_s": round(trained / wall, 1),
        "generated_tokens_per_s": round(generated / gen_seconds, 1) if gen_seconds else None,
        "generation_share": round(gen_seconds / wall, 3) if gen_seconds else None,
        "tokens_trained_scored_generated": [trained, scored, generated],  # what the MFU counts
        "peak_allocated_gib": round(peak_bytes / 2**30, 3),
        "peak_reserved_gib": round(reserved / 2**30, 3) if reserved else None,
        "planned_peak_gib": round(plan.peak_bytes / 2**30, 3),
        "planned_over_measured": round(plan.peak_bytes / peak_bytes, 3),
        "mfu": round(flops / wall / (peak_flops * 1e12), 4) if peak_flops else None,
        "plan_inputs": plan_inputs,  # replan(row) predicts the peak again from these alone
    }


def _plan_args(args: list[str]) -> list[str]:
    """The command-line options of a benchmark run that the plan depends on (not paths or run bookkeeping)."""
    drop = {"--output_dir", "--data_files", "--model_name_or_path"}
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a in drop:
            skip = True
        elif a != "--overwrite":
            out.append(a)
    return out


def replan(row: dict, device: str = "cuda"):
    """The planner's prediction for a recorded benchmark row, from the architecture's shipped shape and the
    row's plan_inputs: no GPU, no weights (tests/test_planner.py checks recorded GPU peaks with it)."""
    import tempfile

    from rlhf_recipes.tools.planner import Launch, Workload, build_plan, load_shape
    from rlhf_recipes.tools.planner.plan import load_for_planning

    hub_id = ARCHITECTURES.get(row["model"], row["model"])  # "tiny": the embedded model
    with tempfile.TemporaryDirectory() as out:
        recipe, bf16 = load_for_planning([str(recipe_path(row["algorithm"])), "--model_name_or_path", hub_id,
                                          "--output_dir", out, *row["plan_inputs"]["recipe_args"]], world_size=1)
    return build_plan(recipe, Launch(), load_shape(hub_id), Workload(**row["plan_inputs"]["workload"]), bf16=bf16,
                      device=device)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algorithms", default="dpo,grpo,ppo,preference_rm,orm",
                        help="comma-separated; one per family by default")
    parser.add_argument("--models", default="book", help="'book' (each family's book model), 'all', or a list of "
                        f"{', '.join(ARCHITECTURES)}")
    parser.add_argument("--lora", default="off,on", help="comma-separated of off, on (LoRA), qlora (LoRA on a 4-bit base)")
    parser.add_argument("--attention", default="sdpa", help="sdpa, flash_attention_2 (skipped when not installed)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--seq-len", type=int, help=f"tokens per sequence (default: the recipe's max_length, at most {BENCH_SEQ_LEN})")
    parser.add_argument("--tiny", action="store_true", help="CPU: the tiny model instead of real shapes")
    parser.add_argument("--peak-tflops", type=float, help="the GPU's dense bf16 peak, when not in the built-in table")
    parser.add_argument("--backends", default="hf", help="policy gradients: comma-separated rollout backends "
                        "(rollout_backend), e.g. hf,static_cache,continuous_batching,vllm_colocate")
    parser.add_argument("--json", help="write all rows to this file")
    parser.add_argument("--keep", action="store_true", help="keep the random-weight models and data (in a temp dir)")
    args, recipe_options = parser.parse_known_args(argv)
    if recipe_options[:1] == ["--"]:
        recipe_options = recipe_options[1:]
    lora_modes = {"off": False, "on": True, "qlora": "qlora"}
    for v in args.lora.split(","):
        if v not in lora_modes:
            parser.error(f"--lora: unknown value {v!r}; expected a comma-separated list of {', '.join(lora_modes)}")

    from custom_losses.policy_gradient.rollout_backends import BACKENDS

    backends = [b for b in args.backends.split(",") if b]
    if any(b not in BACKENDS for b in backends):
        parser.error(f"--backends: expected a comma-separated list of {', '.join(BACKENDS)}, got {args.backends!r}")
    backends = ["hf"] * ("hf" not in backends) + backends  # the baseline of the ratios

    import torch

    from rlhf_recipes.config_schema import fields_of
    from rlhf_recipes.errors import RecipeError
    from rlhf_recipes.registry import ALGORITHMS

    if not args.tiny and not torch.cuda.is_available():
        parser.error("real model shapes need a CUDA GPU; add --tiny for a CPU run of the tiny model")
    workdir = Path(tempfile.mkdtemp(prefix="rlhf-bench-"))
    rows = []
    try:
        for algorithm in [a for a in args.algorithms.split(",") if a]:
            if algorithm not in ALGORITHMS:
                parser.error(f"unknown algorithm {algorithm}")
            models = [None] if args.tiny or args.models == "book" else (
                list(ARCHITECTURES) if args.models == "all" else args.models.split(","))
            for model in models:
                for lora in [lora_modes[v] for v in args.lora.split(",")]:
                    for attention in args.attention.split(","):
                        if attention.startswith("flash"):
                            import importlib.util

                            if importlib.util.find_spec("flash_attn") is None:
                                print(f"skip {algorithm} {attention}: flash-attn is not installed", file=sys.stderr)
                                continue
                        for backend in backends if "rollout_backend" in fields_of(
                                ALGORITHMS[algorithm].config_class) else ["hf"]:
                            try:
                                row = run_benchmark(algorithm, model, args.steps, args.warmup, lora, attention,
                                                    args.seq_len, args.tiny, workdir, args.peak_tflops, backend,
                                                    recipe_options)
                            except RecipeError as e:
                                print(f"skip {algorithm} {backend}: {e}", file=sys.stderr)
                                continue
                            rows.append(row)
                            print(json.dumps(row), flush=True)
                            if torch.cuda.is_available():
                                torch.cuda.empty_cache()
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    _add_backend_ratios(rows)
    _print_table(rows)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


def _add_backend_ratios(rows: list[dict]) -> None:
    """Each policy-gradient row against the hf row of the same configuration, measured in the same run."""
    key = lambda r: (r["algorithm"], r["model"], r["lora"], r["attention"])  # noqa: E731
    base = {key(r): r for r in rows if r.get("rollout_backend") == "hf"}
    for r in rows:
        hf = base.get(key(r))
        if r.get("rollout_backend") is None or hf is None:
            continue
        if r["generated_tokens_per_s"] and hf["generated_tokens_per_s"]:
            r["generation_vs_hf"] = round(r["generated_tokens_per_s"] / hf["generated_tokens_per_s"], 2)
        r["step_speedup_vs_hf"] = round(hf["step_s"] / r["step_s"], 2)
        r["peak_vs_hf"] = round(r["peak_allocated_gib"] / hf["peak_allocated_gib"], 2)


def _print_table(rows: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="step benchmark (after warmup)")
    columns = ["algorithm", "model", "lora", "attention", "micro_batch", "step_s", "tokens_per_s",
               "peak_allocated_gib", "planned_peak_gib", "mfu"]
    if any(r.get("rollout_backend") not in (None, "hf") for r in rows):
        columns[4:4] = ["rollout_backend"]
        columns += ["generated_tokens_per_s", "generation_vs_hf", "step_speedup_vs_hf", "peak_vs_hf"]
    for col in columns:
        table.add_column(col)
    for r in rows:
        table.add_row(*(str(r.get(c)) for c in columns))
    Console(width=160).print(table)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
