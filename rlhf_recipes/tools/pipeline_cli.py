#!/usr/bin/env python
"""The classic two-phase RLHF pipeline in one command: train a reward model, optimize policies against it
(PPO, GRPO) and DPO on the same pairs, then evaluate them side by side on held-out prompts.

    rlhf-recipes pipeline hh                            # real models (GPU)
    rlhf-recipes pipeline hh --profile tiny             # offline, CPU, a few minutes
    rlhf-recipes pipeline hh --launcher "accelerate launch --config_file accelerate_configs/4gpu.yaml"

Writes <out>/{hh_rm,ppo,grpo,dpo}/ (one run each), pipeline_results.json, pipeline_table.txt and
pipeline.png. Finished stages are kept: running the command again only trains what is missing
(--overwrite trains everything again). The work is done in rlhf_recipes/tools/pipeline.py.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path


from rlhf_recipes.tools.pipeline import PIPELINES, PipelineOptions, run_pipeline


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pipeline", choices=sorted(PIPELINES), help="which pipeline (hh: Anthropic HH-RLHF)")
    parser.add_argument("--profile", choices=["tiny"], help="tiny: embedded model and data, CPU")
    parser.add_argument("--out", type=Path, help="output folder (default outputs/<pipeline>[-tiny])")
    parser.add_argument("--launcher", help="command that runs each stage instead of `python`, e.g. "
                        "\"accelerate launch --config_file accelerate_configs/4gpu.yaml\"")
    parser.add_argument("--in-process", action="store_true", help="train the stages in this process (no launcher)")
    parser.add_argument("--overwrite", action="store_true", help="train every stage again, even finished ones")
    parser.add_argument("--evaluate-only", action="store_true", help="only evaluate the finished runs in --out")
    parser.add_argument("--eval-prompts", type=int, help="evaluate on the first N held-out prompts (default: all)")
    parser.add_argument("--eval-batch-size", type=int, default=8)
    parser.add_argument("--eval-temperature", type=float, default=1.0,
                        help="sampling temperature of the evaluation (1.0: the KL is the policy's own)")
    parser.add_argument("--eval-max-new-tokens", type=int, help="default: the policy recipe's max_completion_length")
    parser.add_argument("--best-of", type=int, default=4, help="best-of-n baseline from the reference (1: none)")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--stage-args", nargs=2, action="append", metavar=("STAGE", "ARGS"), default=[],
                        help="extra run.py arguments for one stage (rm, ppo, grpo, dpo), e.g. "
                        "--stage-args ppo '--learning_rate 1e-6'")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    extra: dict[str, list[str]] = {}
    for stage, text in args.stage_args:
        extra.setdefault(stage, []).extend(text.split())
    options = PipelineOptions(
        pipeline=args.pipeline, profile=args.profile, out=args.out, launcher=args.launcher, in_process=args.in_process,
        overwrite=args.overwrite, evaluate_only=args.evaluate_only, eval_prompts=args.eval_prompts,
        eval_batch_size=args.eval_batch_size, eval_temperature=args.eval_temperature,
        eval_max_new_tokens=args.eval_max_new_tokens, best_of_n=args.best_of, seed=args.seed, extra=extra,
    )
    try:
        run_pipeline(options)
    except (ValueError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=os.environ.get("LOGLEVEL", "INFO"), format="%(levelname)s %(name)s: %(message)s")
    sys.exit(main())
