"""The classic two-phase RLHF pipeline in one command: train a reward model, optimize policies against it
(PPO, GRPO) and DPO on the same pairs, then evaluate them side by side on held-out prompts.

    rlhf-recipes pipeline hh                            # real models (GPU)
    rlhf-recipes pipeline hh --profile tiny             # offline, CPU, a few minutes
    rlhf-recipes pipeline hh --launcher "accelerate launch --config_file accelerate_configs/4gpu.yaml"

Phase 1 trains a Bradley-Terry reward model (recipes/hh_rm.yaml). Phase 2 optimizes a policy
against it with a KL penalty to the reference: PPO (recipes/hh_ppo.yaml, KL in the reward) and
GRPO (recipes/hh_grpo.yaml, KL in the loss); DPO (recipes/hh_dpo.yaml) trains on the same
pairs without a reward model. Every run uses the reward model's data split (shuffle seed,
number of rows, held-out fraction), so the held-out prompts were seen by none of them.
Finished stages are kept: running the command again only trains what is missing
(--overwrite trains everything again).

Then each trained policy, the reference policy (the common starting checkpoint) and
best-of-n sampling from the reference are evaluated on the held-out prompts, one sampled
completion per prompt at temperature 1 (the distribution the KL is about):
  reward    mean reward-model score of the completions
  kl        KL(policy || reference) per sequence: the mean over prompts of
            sum_t (log pi(y_t) - log ref(y_t)) over the completion's tokens, y ~ pi
            (an unbiased estimate); best-of-n: the analytic bound log n - (n - 1) / n
  win_rate  share of prompts whose completion the RM scores above the reference's
            completion for the same prompt (ties count 1/2)
Writes <out>/{hh_rm,ppo,grpo,dpo}/ (one run each), <out>/pipeline_results.json, <out>/pipeline_table.txt and
one plot, <out>/pipeline.png (training curves of each run, read with rlhf_recipes.tools.compare, and the final
reward vs KL).
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlhf_recipes.paths import recipe_path
from rlhf_recipes.run_folder import has_config, has_metrics, read_results, run_finished
from rlhf_recipes.tools.document import plain_table, pyplot, save_figure, write_result

logger = logging.getLogger(__name__)

SPLIT_KEYS = ("dataset_shuffle_seed", "num_samples", "eval_fraction")  # the RM's split, given to every run


@dataclass(frozen=True)
class Pipeline:
    name: str
    reward_model: str  # recipe file under recipes/
    policies: dict[str, str]  # method -> recipe file
    uses_reward_model: tuple[str, ...]  # methods whose reward is the trained RM
    description: str = ""


PIPELINES: dict[str, Pipeline] = {
    "hh": Pipeline(
        "hh", reward_model="hh_rm.yaml",
        policies={"ppo": "hh_ppo.yaml", "grpo": "hh_grpo.yaml", "dpo": "hh_dpo.yaml"},
        uses_reward_model=("ppo", "grpo"),
        description="Anthropic HH-RLHF: a Bradley-Terry RM, then PPO and GRPO against it; DPO on the same pairs",
    ),
}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
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
    return parser.parse_args(argv)


# --------------------------------------------------------------------------------------
# Training stages


def resolve(recipe: str, args: list[str]):
    from rlhf_recipes.config import load_recipe

    return load_recipe([str(recipe_path(recipe)), *args])


def rm_dir(pipeline: Pipeline, out: Path) -> Path:
    """<out>/<RM recipe name>: the folder name is the reward's name (rm_hh_rm) in the policies' logs."""
    return out / Path(pipeline.reward_model).stem


def stage_arguments(pipeline: Pipeline, options: argparse.Namespace, out: Path) -> dict[str, list[str]]:
    """run.py arguments of every stage (recipe first): the RM's data split, the RM as reward, output dirs, and
    --stage-args."""
    profile = ["--profile", options.profile] if options.profile else []
    extra = lambda stage: [a for s, text in options.stage_args if s == stage for a in text.split()]
    rm_out = rm_dir(pipeline, out)
    rm_args = [*profile, "--output_dir", str(rm_out)]
    split_values = {key: getattr(resolve(pipeline.reward_model, rm_args).args, key) for key in SPLIT_KEYS}
    split = [arg for key, value in split_values.items() if value is not None for arg in (f"--{key}", str(value))]
    stages = {"rm": [str(recipe_path(pipeline.reward_model)), *rm_args, *extra("rm")]}
    for method, recipe in pipeline.policies.items():
        args = [str(recipe_path(recipe)), *profile, "--output_dir", str(out / method), *split]
        if method in pipeline.uses_reward_model:
            args += ["--reward_funcs", f"[rm:{rm_out}]", "--reward_weights", "[1.0]"]
        stages[method] = args + extra(method)
    return stages


def check_same_reference(pipeline: Pipeline, stages: dict[str, list[str]]):
    """(the reference, the first policy's recipe): every policy must start from the same checkpoint, the reference
    all are compared with."""
    recipes = {method: resolve(Path(stages[method][0]).name, stages[method][1:]) for method in pipeline.policies}
    models = {method: recipe.model.model_name_or_path for method, recipe in recipes.items()}
    if len(set(models.values())) != 1:
        raise ValueError(f"the policies start from different checkpoints {models}: the comparison needs one "
                         "reference policy; set the same model_name_or_path in every policy recipe")
    return next(iter(models.values())), next(iter(recipes.values()))


def train_stages(stages: dict[str, list[str]], folders: dict[str, Path],
                 options: argparse.Namespace) -> dict[str, float]:
    """The pipeline's plan: the reward model, then the policies (PPO / GRPO read it), on the lab's executor one at a
    time (lab/executor.py), as every multi-run tool: an interrupted stage resumes from its
    checkpoint, a finished one is kept (one with other settings is refused: --overwrite), logs in <stage>.log.
    Returns each stage's wall seconds (0 for a kept one)."""
    if options.in_process:  # tests: the runner in this process (a stage that did not finish starts over)
        return {name: _train_in_process(name, argv, folders[name], options) for name, argv in stages.items()}
    from lab.executor import Job, run_plan

    jobs = {name: Job(name, folders[name], tuple(argv)) for name, argv in stages.items()}  # argv names the folder
    code, outcomes = run_plan([[jobs["rm"]], [job for name, job in jobs.items() if name != "rm"]], workers=1,
                              title="pipeline", overwrite=options.overwrite, launcher=options.launcher,
                              stop_on_failure=True)  # the policies read the reward model
    if code != 0:
        raise RuntimeError("pipeline: a stage did not finish (named above, with its log). Fix it and run the pipeline "
                           "again: finished stages are kept, an interrupted one resumes")
    return {o.job.name: o.wall_s for o in outcomes}


def _train_in_process(name: str, argv: list[str], out: Path, options: argparse.Namespace) -> float:
    if run_finished(out) and not options.overwrite:
        logger.info("pipeline: %s already finished in %s (use --overwrite to train it again)", name, out)
        return 0.0
    from rlhf_recipes.train import main as train

    start = time.time()
    logger.info("pipeline: training %s: recipes/run.py %s", name, " ".join(argv))
    if train([*argv, *(["--overwrite"] if has_config(out) else [])]) != 0:
        raise RuntimeError(f"pipeline: stage {name} failed; its log says why. Fix it and run the pipeline again: "
                           "finished stages are kept")
    return time.time() - start


# --------------------------------------------------------------------------------------
# Evaluation


def win_rate(scores: list[float], reference: list[float]) -> float:
    wins = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a, b in zip(scores, reference))
    return wins / max(len(scores), 1)


def _stderr(values: list[float]) -> float:
    return statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else float("nan")


def evaluate_policies(
    runs: dict[str, Path], reference_path: str, rm_path: Path, prompts: list[Any], tokenizer,
    chat_template_kwargs: dict | None, max_new_tokens: int, options: argparse.Namespace,
) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    """Table rows (reference, each run, best-of-n) and a few sample completions per method."""
    from rewards.reward_model import reward_model_reward
    from rlhf_recipes.generation import generate
    from rlhf_recipes.generation import prompt_ids as render
    from rlhf_recipes.models import resolve_model_path
    from lab.kl import kl_best_of_n, sampled_kl
    from rlhf_recipes.tools.policy import load_policy

    rm = reward_model_reward(str(rm_path), batch_size=options.eval_batch_size)
    prompt_ids = render(tokenizer, prompts, chat_template_kwargs)
    rows: list[dict[str, Any]] = []
    samples: dict[str, list[dict[str, Any]]] = {}

    temperature = options.eval_temperature
    sampling = {"temperature": temperature, "top_p": 1.0, "top_k": 0, "min_p": 0.0} if temperature > 0 else {}

    def draw(model, seed: int) -> tuple[list[list[int]], list[str], list[float]]:
        """One completion per prompt, sampled at the temperature from the whole distribution (no top-k / top-p /
        min-p cut), greedy at 0: (token ids up to and including the end token, their texts, their RM scores)."""
        ids = [group[0]["ids"] for group in generate(
            model, tokenizer, prompts, n=1, batch_size=options.eval_batch_size, max_new_tokens=max_new_tokens,
            chat_template_kwargs=chat_template_kwargs, desc="HH samples", seed=seed, **sampling)]
        texts = [tokenizer.decode(c, skip_special_tokens=True) for c in ids]
        return ids, texts, rm(completions=[[{"role": "assistant", "content": t}] for t in texts], prompts=prompts)

    def add(method: str, run: str, ids, texts, scores, kl: float, kl_per_token: float | None, **note) -> None:
        rows.append({"method": method, "run": run, "mean_reward": _mean(scores), "reward_stderr": _stderr(scores),
                     "kl": kl, "kl_per_token": kl_per_token,
                     "win_rate": win_rate(scores, ref_scores) if rows else 0.5,  # the reference's: by definition
                     "mean_length": _mean([len(c) for c in ids]), **note})
        samples[method] = _samples(prompts, texts, scores)

    reference = load_policy(resolve_model_path(reference_path))
    ref_ids, ref_texts, ref_scores = draw(reference, options.seed)
    add("reference", str(reference_path), ref_ids, ref_texts, ref_scores, 0.0, 0.0)
    for method, run in runs.items():
        policy = load_policy(run)
        ids, texts, scores = draw(policy, options.seed + 1)
        # the sum of log pi - log ref at the sampled tokens, at temperature 1 (the table's KL, as documented)
        _, kl = sampled_kl(policy, reference, prompt_ids, ids, tokenizer.pad_token_id,
                           batch_size=options.eval_batch_size, exact=False)
        del policy
        add(method, str(run), ids, texts, scores, _mean(kl), sum(kl) / max(sum(len(c) for c in ids), 1))
    if options.best_of > 1:
        n = options.best_of
        drawn = [draw(reference, options.seed + 100 + k) for k in range(n)]
        picks = [max(drawn, key=lambda d: d[2][i]) for i in range(len(prompts))]  # per prompt, the RM's best draw
        ids, texts, scores = ([pick[part][i] for i, pick in enumerate(picks)] for part in range(3))
        add(f"best_of_{n}", f"{n} samples of the reference, the RM picks one", ids, texts, scores, kl_best_of_n(n),
            None, kl_note="analytic bound log n - (n-1)/n")
    return rows, samples


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def _samples(prompts: list[Any], completions: list[str], scores: list[float], count: int = 2) -> list[dict]:
    from rewards.text import prompt_text

    return [{"prompt": prompt_text(p)[-300:], "completion": c[:400], "reward": round(s, 4)}
            for p, c, s in list(zip(prompts, completions, scores))[:count]]


# --------------------------------------------------------------------------------------
# The table and the plot


def format_table(rows: list[dict[str, Any]], header: str = "") -> str:
    cells = [[r["method"], f"{r['mean_reward']:+.4f}" + ("" if math.isnan(r["reward_stderr"]) else
                                                          f" ± {r['reward_stderr']:.3f}"), f"{r['kl']:.4f}",
              "-" if r.get("kl_per_token") is None else f"{r['kl_per_token']:.4f}", f"{r['win_rate']:.3f}",
              f"{r['mean_length']:.1f}"] for r in rows]
    return plain_table(["method", "reward (RM)", "KL to ref", "KL/token", "win-rate", "length"], cells, header) + (
        "\nreward: mean RM score on held-out prompts; KL: per sequence, sum over tokens of log pi - log ref "
        "(y ~ pi, temperature 1); win-rate: RM prefers the method's completion to the reference's (ties 1/2).")


def _names(methods) -> str:
    """Methods as the figure names them: PPO / GRPO."""
    return " / ".join(m.upper() for m in methods)


def plot(rows: list[dict[str, Any]], runs: dict[str, Path], rm_reward: str, path: Path, title: str,
         rm_methods: tuple[str, ...]) -> Path:
    """One figure: RM reward and KL during training (the methods against the RM, `rm_methods`: PPO, GRPO), the
    reward accuracy of the others (DPO), final reward vs KL."""
    from matplotlib.ticker import MaxNLocator

    from rlhf_recipes.tools.compare.load import load_run

    plt = pyplot()
    loaded = {m: load_run(p, m) for m, p in runs.items() if has_metrics(p)}
    colors = {r["method"]: f"C{i % 10}" for i, r in enumerate(rows)}  # the colour cycle's i-th
    pairs = tuple(m for m in runs if m not in rm_methods)  # trained on the RM's pairs, without it
    panels = [("RM reward during training", [f"rewards/{rm_reward}/mean", "reward"], rm_methods),
              ("KL to the reference during training", ["kl"], rm_methods),
              (f"{_names(pairs)} during training", ["rewards/accuracies"], pairs)]
    fig, axes = plt.subplots(1, 4, figsize=(19, 4.2))
    for ax, (panel_title, metrics, methods) in zip(axes, panels):
        for method in (m for m in methods if m in loaded):
            for metric in metrics:  # the first one the run logged
                steps, values = loaded[method].series(metric)
                if len(steps):
                    ax.plot(steps, values, marker="o" if len(steps) < 30 else None, ms=3, color=colors.get(method),
                            label=f"{method}: {metric}")
                    break
        ax.set_title(panel_title, fontsize=10)
        ax.set_xlabel("optimizer step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    ax = axes[3]
    for r in rows:
        ax.errorbar(r["kl"], r["mean_reward"], yerr=0.0 if math.isnan(r["reward_stderr"]) else r["reward_stderr"],
                    fmt="o", color=colors.get(r["method"]), capsize=3)
        ax.annotate(f"{r['method']} ({r['win_rate']:.2f})", (r["kl"], r["mean_reward"]), fontsize=8,
                    xytext=(4, 4), textcoords="offset points")
    ax.set_title("held-out: RM reward vs KL to reference (win-rate)", fontsize=10)
    ax.set_xlabel("KL(policy || reference) per sequence")
    ax.set_ylabel("mean RM reward")
    ax.grid(alpha=0.3)
    return save_figure(fig, path, title)


# --------------------------------------------------------------------------------------
# The whole pipeline


def run_pipeline(options: argparse.Namespace) -> dict[str, Any]:
    """The pipeline as `parse` reads its command line."""
    from rewards.reward_model import reward_name
    from rlhf_recipes.data import load_splits
    from rlhf_recipes.models import load_tokenizer

    pipeline = PIPELINES[options.pipeline]
    out = Path(options.out or (Path("outputs") / (f"{pipeline.name}-{options.profile}" if options.profile
                                                   else pipeline.name)))
    out.mkdir(parents=True, exist_ok=True)
    stages = stage_arguments(pipeline, options, out)
    reference_path, recipe = check_same_reference(pipeline, stages)

    rm_out = rm_dir(pipeline, out)
    runs = {m: out / m for m in pipeline.policies}
    walls = {} if options.evaluate_only else train_stages(
        stages, {name: rm_out if name == "rm" else runs[name] for name in stages}, options)
    missing = [str(p) for p in [rm_out, *runs.values()] if not run_finished(p)]
    if missing:
        raise RuntimeError(f"pipeline: no finished run in {missing}; train them first (without --evaluate-only)")

    # Held-out prompts: the eval split of the first policy recipe (= the RM's held-out pairs' prompts).
    _, held_out = load_splits(recipe)
    if held_out is None:
        raise ValueError("pipeline: the recipes hold no rows out (eval_fraction 0): nothing to evaluate on")
    prompts = list(held_out["prompt"])[:options.eval_prompts or None]
    tokenizer = load_tokenizer(recipe.model)
    max_new = options.eval_max_new_tokens or recipe.training.max_completion_length
    rows, samples = evaluate_policies(runs, reference_path, rm_out, prompts, tokenizer,
                                      recipe.training.chat_template_kwargs, max_new, options)
    for row in rows:
        if row["method"] in runs:
            final = read_results(runs[row["method"]])
            row.update(steps=final.get("steps"), train_wall_seconds=final.get("wall_seconds"))

    rm_final = read_results(rm_out)
    header = (f"{pipeline.description}\nreward model: {rm_out} (held-out pairwise accuracy "
              f"{rm_final.get('evaluation', {}).get('accuracy', float('nan')):.3f}); {len(prompts)} held-out prompts, "
              f"temperature {options.eval_temperature}, up to {max_new} new tokens")
    table = format_table(rows, header)
    results = {
        "pipeline": pipeline.name, "profile": options.profile, "out": str(out), "reference": reference_path,
        "reward_model": {"path": str(rm_out), "evaluation": rm_final.get("evaluation")},
        "evaluation": {"prompts": len(prompts), "temperature": options.eval_temperature, "max_new_tokens": max_new,
                       "seed": options.seed, "best_of_n": options.best_of},
        "methods": rows, "samples": samples, "train_wall_seconds": walls,
        "runs": {"rm": str(rm_out), **{m: str(p) for m, p in runs.items()}},
    }
    title = (f"{pipeline.name}: reward model, then {_names(pipeline.uses_reward_model)} against it, "
             f"{_names(m for m in pipeline.policies if m not in pipeline.uses_reward_model)} on the pairs")
    write_result(results, out / "pipeline_results.json", text=table, text_path=out / "pipeline_table.txt",
                 draw=lambda path: plot(rows, runs, reward_name(str(rm_out)), path, title, pipeline.uses_reward_model),
                 figure_path=out / "pipeline.png")
    print(table)
    return results


def main(argv: list[str] | None = None) -> int:
    try:
        run_pipeline(parse(argv))
    except (ValueError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=os.environ.get("LOGLEVEL", "INFO"), format="%(levelname)s %(name)s: %(message)s")
    sys.exit(main())
