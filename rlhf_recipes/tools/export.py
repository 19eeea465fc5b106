"""Hand a trained model on: a standard Hugging Face model folder with a model card.

    rlhf-recipes export outputs/dpo exported/dpo
    rlhf-recipes export outputs/dpo-lora exported/dpo --merge-lora     # the adapter merged into its base
    rlhf-recipes export outputs/grpo exported/grpo-500 --checkpoint 500  # a checkpoint of an unfinished run

OUT then loads with the plain transformers classes: AutoModelForCausalLM for a policy,
AutoModelForSequenceClassification for a Bradley-Terry reward model, AutoModelForTokenClassification
for an outcome / process reward model (its config.json keeps `reward_model`: how it reads its input).
A LoRA policy is exported as its adapter (load it with peft's AutoPeftModelForCausalLM) unless
--merge-lora merges it into the recipe's base model, loaded unquantized in the recipe's dtype; a LoRA
reward model is exported from the merged copy its run saved. The tokenizer and its chat template come
along, and README.md is a model card: the recipe, the paper and book chapter (registry), key settings,
the final metrics and the evaluations in RUN_DIR/eval/, under the hub's metadata (base_model, datasets, tags,
library_name). Only model files are written: no optimizer state.

To the hub (after `hf auth login`, or HF_TOKEN set):  hf upload YOUR_NAME/REPO_NAME OUT
(or, in Python, huggingface_hub.upload_folder(repo_id="YOUR_NAME/REPO_NAME", folder_path="OUT")).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from rlhf_recipes.paths import unwritable_reason
from rlhf_recipes.run_folder import CONFIG_FILE, RunFolderError
from rlhf_recipes.tools.document import number
from rlhf_recipes.tools.trained_model import TrainedModel, open_trained_model


# Settings worth a line in the card (when the recipe has them); the algorithm's own defaults are added.
KEY_SETTINGS = ("model_name_or_path", "dataset", "dataset_name", "num_samples", "system_prompt", "effective_batch_size",
                "learning_rate", "lr_scheduler_type", "num_train_epochs", "max_steps", "beta", "loss_type",
                "max_length", "max_completion_length", "num_generations", "temperature", "reward_funcs",
                "use_peft", "lora_r", "lora_alpha", "dtype", "seed")


def check_out(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise RunFolderError(f"OUT {out}: exists and is not an empty folder; pick a new path (export never "
                             "overwrites)")
    problem = unwritable_reason(out)
    if problem:  # found now, not after the model has been loaded and half written
        raise RunFolderError(f"OUT {out}: cannot be written: {problem}; pick a writable path")


def export(trained: TrainedModel, out: Path, merge_lora: bool = False) -> dict[str, Any]:
    """Write the model, tokenizer and model card to `out`; returns what was written (also in the card)."""
    if trained.reward_model:
        model, tokenizer, info = trained.load_reward_model()  # in its saved dtype
        kind = {"preference": "AutoModelForSequenceClassification"}.get(info["kind"], "AutoModelForTokenClassification")
        form = f"reward model ({info['kind']}), load with {kind}"
        if trained.is_adapter:
            form += " (LoRA: the merged copy its run saved)"
    else:
        model = trained.load_policy(merge=merge_lora)
        tokenizer = trained.load_tokenizer()
        if trained.is_adapter and not merge_lora:
            form = f"LoRA adapter on {trained.recipe.model.model_name_or_path}, load with peft AutoPeftModelForCausalLM"
        elif trained.is_adapter:
            form = (f"LoRA adapter merged into {trained.recipe.model.model_name_or_path}, load with "
                    "AutoModelForCausalLM")
        else:
            form = "causal LM, load with AutoModelForCausalLM"
    summary = {"source": str(trained.folder), "form": form, "merged_lora": bool(merge_lora and trained.is_adapter),
               "adapter": trained.is_adapter and not merge_lora and not trained.reward_model}
    card = model_card(trained, summary)  # before anything is written: a card that fails leaves no half-written OUT
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    card.save(out / "README.md")
    return summary


# --------------------------------------------------------------------------------------
# The model card


def model_card(trained: TrainedModel, summary: dict[str, Any]):
    """The exported folder's README.md: a huggingface_hub ModelCard (rlhf_recipes/model_card.py)."""
    from rlhf_recipes import model_card as card
    from rlhf_recipes.registry import ALGORITHMS

    run, recipe = trained.run, trained.recipe
    algorithm = ALGORITHMS[recipe.algorithm.name]
    config = run.config
    pipeline = ("token-classification" if "TokenClassification" in summary["form"] else "text-classification"
                if "SequenceClassification" in summary["form"] else "text-generation")
    data = card.card_metadata(config, algorithm.name, adapter=summary["adapter"], pipeline_tag=pipeline)
    lines = [
        f"# {run.path.name}: {algorithm.name}", "",
        f"Trained with rlhf-recipes' `{algorithm.name}` recipe: {algorithm.paper}; chapter {algorithm.chapter} of "
        "the RLHF book (https://rlhfbook.com).", "",
        f"- Model: {summary['form']}",
        f"- Exported from: `{summary['source']}`",
        f"- Status: {run.status}, {run.steps} optimizer steps",
    ]
    if run.profile:
        lines.append(f"- Profile: `{run.profile}` (a test-sized model: not for use)")
    settings = dict.fromkeys([*KEY_SETTINGS, *algorithm.defaults])
    rows = [(k, config[k]) for k in settings if config.get(k) is not None]
    lines += ["", "## Key settings", "", "| setting | value |", "|---|---|",
              *(f"| `{k}` | `{json.dumps(v) if not isinstance(v, str) else v}` |" for k, v in rows)]
    metrics = run.final_metrics()
    if metrics:
        lines += ["", "## Final metrics", "", "| metric | value |", "|---|---|",
                  *(f"| {k} | {v:.4g} |" for k, v in metrics.items())]
    if run.evaluations:
        lines += ["", "## Evaluations", "", "| evaluation | metric | value | baseline | difference [low, high] |",
                  "|---|---|---|---|---|"]
        for ev in run.evaluations:
            for metric, value in ev["metrics"].items():
                baseline = (ev.get("baseline") or {}).get(metric) if isinstance(ev.get("baseline"), dict) else None
                diff = (ev.get("difference") or {}).get(metric)
                diff = diff if isinstance(diff, dict) and isinstance(diff.get("value"), (int, float)) else {}
                bounds = [diff.get(k) for k in ("low", "high")]
                interval = "-" if not diff else f"{diff['value']:+.4g}" + (  # a fixed number has no interval (null)
                    " [{:+.4g}, {:+.4g}]".format(*bounds) if all(isinstance(b, (int, float)) for b in bounds) else "")
                lines.append(f"| {ev['name']} | {metric} | {number(value)} | {number(baseline)} | {interval} |")
    recipe_text = (run.path / CONFIG_FILE).read_text()
    lines += ["", "## Recipe", "", "The run's resolved recipe (its `config.yaml`); `python recipes/run.py config.yaml` "
              "re-runs it in an rlhf-recipes checkout.", "", "```yaml", recipe_text.rstrip(), "```", ""]
    return card.model_card(data, lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rlhf-recipes export", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", help="a run's output_dir (or a checkpoint-<step> folder inside one)")
    parser.add_argument("out", type=Path, help="the folder to write (new or empty)")
    parser.add_argument("--merge-lora", "--merge_lora", action="store_true",
                        help="a LoRA run: merge the adapter into its base model (peft merge_and_unload)")
    parser.add_argument("--checkpoint", metavar="STEP",
                        help="export this complete checkpoint instead of the final model")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        check_out(args.out)
        trained = open_trained_model(args.run, args.checkpoint)
        if args.merge_lora and not trained.is_adapter and not trained.reward_model:
            raise RunFolderError(f"--merge-lora: {trained.folder} holds a full model, not a LoRA adapter; leave "
                                 "the flag out")
    except RunFolderError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    summary = export(trained, args.out, args.merge_lora)
    print(f"exported {summary['source']} to {args.out}: {summary['form']}\n"
          f"to the hub: hf upload YOUR_NAME/REPO_NAME {args.out}")
    return 0


if __name__ == "__main__":
    logging.basicConfig(level="INFO", format="%(levelname)s %(name)s: %(message)s")
    sys.exit(main())
