"""Reward models (book chapter 5): Bradley-Terry preference RM, outcome RM (ORM), process RM (PRM).

The algorithm's config class says which kind it trains (`rm_kind`):
  preference  AutoModelForSequenceClassification, 1 label: a linear head on the last non-pad
              token; TRL's RewardTrainer on pre-tokenized pairs (truncated, not dropped);
  outcome     AutoModelForTokenClassification, 1 label: one logit per token (OutcomeRMTrainer);
  process     AutoModelForTokenClassification, 3 labels (bad/neutral/good) (ProcessRMTrainer).
Rows are tokenized once per run (rlhf_recipes/data/reward_model_examples.py, the layout of
rewards/reward_model_encoding.py); the run's log gets the token-length statistics and the count of
dropped examples. At the end of training `final_results` evaluates the model on the held-out split
(pairwise accuracy and margin, top-1 / pairwise accuracy over rollouts, step accuracy) and scores a
correct and a perturbed answer, the book's demo (rlhf_recipes/evaluation/reward_model_book.py);
`rlhf-recipes evaluate` does the same for a saved model, with intervals.
The family's hooks (`RewardModels`, at the end) override rlhf_recipes/families/base.py's defaults.
"""

from __future__ import annotations

import logging
from typing import Any

from rlhf_recipes.data.reward_model_examples import reward_model_info, rm_kind, tokenize_split
from rlhf_recipes.evaluation.reward_model_book import demo, evaluate, shows_book_demo
from rlhf_recipes.families.base import Family

logger = logging.getLogger(__name__)



NUM_LABELS = {"preference": 1, "outcome": 1, "process": 3}
STEP_LABELS = {0: "bad", 1: "neutral", 2: "good"}


def _merged_for_scoring(recipe, trainer):
    """The trained model as one network. A LoRA run also saves its merged model to
    <output_dir>/merged, so `rlhf-recipes evaluate` and `rm:<output_dir>` rewards load it like a full one."""
    import os
    from pathlib import Path

    from accelerate.utils import is_peft_model

    from rewards.reward_model_files import MERGED_SUBDIR

    model = trainer.model
    if not is_peft_model(model):
        return model
    if getattr(model, "is_loaded_in_4bit", False) or getattr(model, "is_loaded_in_8bit", False) or (
            trainer.is_deepspeed_enabled and trainer.accelerator.state.deepspeed_plugin.zero_stage == 3):
        logger.warning("LoRA reward model on a quantized or ZeRO-3 sharded base: not merged; merge the adapter in "
                       "%s into its base model to evaluate it or use it as a reward", trainer.args.output_dir)
        return model
    merged = model.merge_and_unload()
    if int(os.environ.get("RANK", "0")) == 0:
        target = Path(trainer.args.output_dir) / MERGED_SUBDIR
        merged.save_pretrained(target)
        trainer.processing_class.save_pretrained(target)
    return merged


# --------------------------------------------------------------------------------------
# The family


class RewardModels(Family):
    name = "reward_model"
    def token_classifiers(self, recipe) -> list[str]:
        return [] if rm_kind(recipe) == "preference" else ["model_name_or_path"]  # ORM / PRM: a score per token

    def load_model(self, recipe, tokenizer):
        from transformers import (
            AutoConfig, AutoModelForSequenceClassification, AutoModelForTokenClassification, set_seed,
        )

        from rlhf_recipes.models import model_init_kwargs, resolve_model_path

        kind = rm_kind(recipe)
        path = resolve_model_path(recipe.model.model_name_or_path)
        kwargs = model_init_kwargs(recipe.model)
        set_seed(recipe.training.seed)  # the new head's initialisation
        config = AutoConfig.from_pretrained(path, revision=recipe.model.model_revision, num_labels=NUM_LABELS[kind])
        if kind == "preference":
            from trl.trainer.reward_trainer import suppress_seqcls_warning

            with suppress_seqcls_warning():
                model = AutoModelForSequenceClassification.from_pretrained(path, config=config, **kwargs)
        else:
            if kind == "process":
                config.id2label, config.label2id = dict(STEP_LABELS), {v: k for k, v in STEP_LABELS.items()}
            # The book's head: Linear(hidden, 1) without bias for one output, with bias for three.
            config.token_classification_bias = kind == "process"
            model = AutoModelForTokenClassification.from_pretrained(path, config=config, **kwargs)
        model.config.pad_token_id = tokenizer.pad_token_id
        model.config.reward_model = reward_model_info(recipe)
        return model

    def peft_config(self, recipe):
        """LoRA for a classification task: the new head trains in full and is saved with the adapter."""
        from trl import get_peft_config

        peft_config = get_peft_config(recipe.model)
        if peft_config is not None:  # a classification task, and the new head trains and is saved with the adapter
            if str(peft_config.task_type) in ("CAUSAL_LM", "TaskType.CAUSAL_LM"):  # ModelConfig's default
                peft_config.task_type = "SEQ_CLS" if rm_kind(recipe) == "preference" else "TOKEN_CLS"
            peft_config.modules_to_save = sorted(set(peft_config.modules_to_save or []) | {"score"})
            # The head trains in full; with `all-linear` targets it would also get a LoRA adapter of its own.
            peft_config.exclude_modules = sorted(set(peft_config.exclude_modules or []) | {"score"})
            if recipe.model.load_in_4bit and recipe.model.dtype != "bfloat16":
                from rlhf_recipes.errors import RecipeError

                raise RecipeError(
                    f"{recipe.source}: load_in_4bit with dtype {recipe.model.dtype}: TRL casts the trainable head to "
                    "bfloat16, which then mismatches the hidden states. Use `dtype: bfloat16` for QLoRA reward models."
                )
        return peft_config

    def build_trainer(self, recipe, model, tokenizer, train, eval, callbacks):
        """Rows tokenized here, once per run; then the common construction with this family's peft_config."""
        train_set, train_stats = tokenize_split(recipe, tokenizer, train, "train")
        eval_set, eval_stats = tokenize_split(recipe, tokenizer, eval, "eval") if eval is not None else (None, None)
        trainer = super().build_trainer(recipe, model, tokenizer, train_set, eval_set, callbacks)
        trainer.rm_data_stats = {"train": train_stats, "eval": eval_stats}
        trainer.rm_eval_rows = eval
        return trainer

    def final_results(self, recipe, trainer) -> dict[str, Any]:
        """Evaluation numbers and demo scores for final_results.json."""
        model = _merged_for_scoring(recipe, trainer)
        info = getattr(model.config, "reward_model", None) or reward_model_info(recipe)
        out: dict[str, Any] = {"data": getattr(trainer, "rm_data_stats", None)}
        batch = recipe.training.per_device_eval_batch_size
        if trainer.eval_dataset is not None:
            out["evaluation"] = evaluate(info, model, trainer.processing_class, trainer.eval_dataset, batch)
        else:
            logger.warning("no eval split (eval_fraction 0): final_results.json has no evaluation numbers")
        out["demo"] = demo(info, model, trainer.processing_class, getattr(trainer, "rm_eval_rows", None),
                           recipe.args.system_prompt) if shows_book_demo(recipe) else []
        return out

    def evaluator(self, recipe, options):
        """The book's numbers on the held-out split, with intervals (rlhf_recipes/evaluation/reward_models.py)."""
        from rlhf_recipes.evaluation.reward_models import RewardModelEvaluator

        return RewardModelEvaluator(recipe, options, load_model=self.load_model)


FAMILY = RewardModels()
