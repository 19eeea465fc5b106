#!/usr/bin/env python
"""Time the book's own policy-gradient loop on the shapes `python -m benchmarks.grpo_phases` measures (a benchmark, not a test).

    git clone https://github.com/natolambert/rlhf-book
    PYTHONPATH=rlhf-book/code python -m benchmarks.book_loop --loss grpo --batches 2

It runs the book's code (code/policy_gradients: its train.py main() with configs/<loss>.yaml, unmodified) on random
weights of the config's model architecture (Qwen3-1.7B: built from its shipped config.json, no download) with the
tiny tokenizer, the same inputs as `python -m benchmarks.grpo_phases --random-qwen3-1.7b`, so the two step times compare
on the same GPU. The book's loop logs its rewards to wandb after each generation and its loss after each optimizer
step; wandb is replaced here by a recorder of when each call happens, so a rollout batch's generation time runs from
the previous batch's last optimizer step to its rewards log, and its training time from there to its own last step.
The first batch warms up (its generation starts before any log); the last batch is reported.
This project does not ship the book's code: the book's repository must be on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import types
from pathlib import Path

GENERATED, STEPPED = "generated", "stepped"


class _Enough(Exception):
    """Raised from the wandb stand-in once the asked-for batches have trained: the book's loop catches nothing."""


def batches_from_events(events: list[tuple[float, str]]) -> list[dict]:
    """Per rollout batch: generation seconds (None for the first: it began before any log), training seconds and
    optimizer steps, from (time, GENERATED | STEPPED) events in the order the loop logged them."""
    starts = [i for i, (_, kind) in enumerate(events) if kind == GENERATED]
    rows = []
    for first, end in zip(starts, starts[1:] + [len(events)]):
        steps = [events[i][0] for i in range(first + 1, end) if events[i][1] == STEPPED]
        if not steps:  # stopped before this batch trained
            continue
        generated_at = events[first][0]
        previous = events[first - 1][0] if first > 0 else None
        rows.append({"generation_s": None if previous is None else round(generated_at - previous, 3),
                     "training_s": round(steps[-1] - generated_at, 3), "optimizer_steps": len(steps),
                     "batch_s": round(steps[-1] - (generated_at if previous is None else previous), 3)})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loss", default="grpo", help="the book's config name (code/policy_gradients/configs/)")
    parser.add_argument("--batches", type=int, default=2, help="rollout batches to run; the last is reported")
    parser.add_argument("--json", help="also write the numbers to this file")
    args = parser.parse_args(argv)
    try:
        import policy_gradients
    except ImportError:
        parser.error("the book's code is not importable: clone https://github.com/natolambert/rlhf-book and run with "
                     "PYTHONPATH=<that clone>/code")
    configs = Path(policy_gradients.__file__).parent / "configs"
    if not (configs / f"{args.loss}.yaml").exists():
        parser.error(f"--loss: no {configs / args.loss}.yaml; the book has "
                     f"{', '.join(sorted(p.stem for p in configs.glob('*.yaml')))}")

    import torch
    import yaml
    from transformers import AutoTokenizer
    import accelerate.tracking  # noqa: F401  (imported before wandb is replaced: it asks whether wandb is installed)

    from rlhf_recipes.tiny import tiny_model_path
    from benchmarks.families import ARCHITECTURES, build_random_model

    if not torch.cuda.is_available():
        parser.error("the book's loop at real shapes needs a CUDA GPU")
    cfg = yaml.safe_load((configs / f"{args.loss}.yaml").read_text())
    steps_per_batch = cfg["prompts_per_step"] * cfg["num_rollouts"] // (cfg["train_batch_size"] * cfg["batch_acc"])
    events: list[tuple[float, str]] = []

    def log(values: dict, **_):
        torch.cuda.synchronize()
        events.append((time.perf_counter(), GENERATED if any(k.startswith("avg_") for k in values) else STEPPED))
        if sum(kind == STEPPED for _, kind in events) >= steps_per_batch * args.batches:
            raise _Enough

    sys.modules["wandb"] = types.SimpleNamespace(init=lambda **_: None, log=log)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path())
    arch = {hub_id: name for name, hub_id in ARCHITECTURES.items()}.get(cfg["model_name"])  # the shipped shapes
    if arch is None:
        parser.error(f"{args.loss}.yaml's model {cfg['model_name']} has no shipped architecture here")
    with tempfile.TemporaryDirectory() as work:
        cfg.update(model_name=str(build_random_model(arch, Path(work), tokenizer)), wandb_project=None)
        from policy_gradients.config import Config
        from policy_gradients.train import main as book_main

        try:
            book_main(Config(**cfg))
        except _Enough:
            pass
    rows = batches_from_events(events)
    last = rows[-1]
    report = {"loop": f"the book's code/policy_gradients, configs/{args.loss}.yaml", "model": f"{arch}, random weights",
              "device": torch.cuda.get_device_name(), "batches": rows,
              "step_seconds": round(last["batch_s"] / last["optimizer_steps"], 3),
              # an upper bound: a generate call stops early once all its sequences end
              "generation_tokens_at_most": cfg["prompts_per_step"] * cfg["num_rollouts"] * cfg["max_new_tokens"]}
    print(json.dumps(report, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
