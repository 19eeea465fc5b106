"""A run's trained model, loaded the way it was trained: `rlhf-recipes chat` and `export` share this.

The model of a run is its output_dir once it has finished (the runner saves the final model there), or
one of its complete checkpoints. A policy loads as a causal LM; a LoRA policy as its adapter on the
recipe's base model (peft), merged on request. A reward model loads as the head it trained
(rewards/reward_model_scoring.py: a sequence classifier for a Bradley-Terry RM, a token classifier for
an ORM / PRM); a LoRA reward model from the merged copy its run saves (<output_dir>/merged).
The prompt a policy sees is built as in training: the data source's system message
(rlhf_recipes/data/sources.py `chat_prompt`), the run's saved tokenizer and chat template, and the
recipe's chat_template_kwargs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlhf_recipes.checkpoints import checkpoint_step, is_checkpoint_dir, weights_file_problem
from rlhf_recipes.run_folder import CONFIG_FILE, RunFolderError, SavedRun

ADAPTER_CONFIG = "adapter_config.json"
# The families whose runs save a scoring model (a reward model: its head, and a LoRA run's merged/ copy), not a policy.
SCORING_FAMILIES = frozenset({"reward_model"})


def check_weights_readable(folder: Path, flag: str) -> None:
    """Every safetensors file in a saved-model folder has a whole header and the bytes it promises (safetensors
    checks both on open, reading no tensor); a file cut short (a save killed mid-write, a full disk, a partial
    copy) is one line naming it instead of safetensors' traceback at load."""
    from rlhf_recipes.config import RecipeError

    for file in sorted(Path(folder).glob("*.safetensors")):
        problem = weights_file_problem(file)
        if problem is not None:
            run = file.parent.parent if is_checkpoint_dir(file.parent) else file.parent
            others = sorted((c for c in run.glob("checkpoint-*") if is_checkpoint_dir(c) and c != file.parent),
                            key=checkpoint_step)
            offer = f", or use another checkpoint ({others[-1]})" if others else ""
            raise RecipeError(f"{flag}: {file} is cut short or corrupt ({problem}), {file.stat().st_size}"
                              f" bytes: the save did not finish (a killed job, a full disk) or the copy is partial. "
                              f"Copy or save the model again{offer}") from None


@dataclass
class TrainedModel:
    """Where a run's model is, and what it is; `load_*` builds it."""

    run: SavedRun
    folder: Path  # the run folder (finished) or one of its checkpoints
    recipe: Any  # rlhf_recipes.config.Recipe
    reward_model: bool

    @property
    def is_adapter(self) -> bool:
        return (self.folder / ADAPTER_CONFIG).is_file() and not (self.folder / "config.json").is_file()

    @property
    def label(self) -> str:
        where = self.run.path.name + (f"/{self.folder.name}" if self.folder != self.run.path else "")
        return f"{where} ({self.run.algorithm})"

    @property
    def base_model(self) -> str:
        """The model the run started from (the reference policy), as a loadable path or hub id."""
        from rlhf_recipes.models import resolve_model_path

        return resolve_model_path(self.recipe.model.model_name_or_path)

    # --- Loading -----------------------------------------------------------------------------
    def load_tokenizer(self):
        """The run's saved tokenizer: the chat template it trained with (SFT's `chat_template_from` included)."""
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(self.folder))
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        return tokenizer

    def load_policy(self, dtype=None, merge: bool = False):
        """The trained causal LM (a LoRA run: PeftModel of the adapter on its base, merged if asked)."""
        from rlhf_recipes.tools.policy import load_policy

        if not self.is_adapter:
            return load_policy(self.folder, dtype or "auto", device=None)
        from peft import PeftModel

        base = load_policy(self.base_model, dtype or self.recipe.model.dtype or "auto", device=None,
                           revision=self.recipe.model.model_revision)
        model = PeftModel.from_pretrained(base, str(self.folder))
        return model.merge_and_unload() if merge else model

    def load_reward_model(self, dtype=None):
        """(model, tokenizer, info) of the trained reward model (rewards/reward_model_scoring.py)."""
        from rewards.reward_model_scoring import load_reward_model

        try:
            return load_reward_model(str(self.folder), dtype)
        except ValueError as e:
            raise RunFolderError(str(e)) from None

    def prompt_ids(self, tokenizer, user_text: str) -> list[int]:
        """Token ids of `user_text` asked as the run's training prompts were built."""
        from rlhf_recipes.data.sources import chat_prompt
        from rlhf_recipes.generation import prompt_ids

        kwargs = dict(self.recipe.setting("chat_template_kwargs") or {})
        return prompt_ids(tokenizer, [chat_prompt(self.recipe, user_text)], kwargs)[0]


def open_trained_model(path: str | Path, checkpoint: str | None = None, *, require_finished: bool = True,
                       flag: str = "RUN_DIR", checkpoint_option: bool = True) -> TrainedModel:
    """The model of the run at `path` (a run folder, or a checkpoint-<step> folder inside one).

    Errors (RunFolderError, one line) name what is wrong and the fix: not a run, a run that has not finished
    (its complete checkpoints offered, with `--checkpoint STEP` where the tool has that option), an incomplete
    checkpoint."""
    from rlhf_recipes.config import RecipeError, load_recipe
    path = Path(path)
    if is_checkpoint_dir(path) and path.parent.is_dir() and checkpoint is None:
        path, checkpoint = path.parent, path.name
    run = SavedRun.open(path)
    if checkpoint is not None:
        folder = run.checkpoint(checkpoint).path
    else:
        if require_finished and not run.finished:
            complete = [c.step for c in run.checkpoints if c.complete]
            option = "--checkpoint STEP, or " if checkpoint_option else ""
            offer = (f"use one of its complete checkpoints ({', '.join(map(str, complete))}): {option}the folder "
                     f"{path / f'checkpoint-{complete[-1]}'}" if complete else "it has no complete checkpoint either")
            raise RunFolderError(f"{flag} {path}: the run has not finished ({run.status}), so its folder holds no "
                                 f"final model; {offer}")
        folder = run.path
    try:
        recipe = load_recipe([str(run.path / CONFIG_FILE)], construct=False)
    except RecipeError as e:
        raise RunFolderError(f"{run.path / CONFIG_FILE}: {e}") from None
    reward_model = recipe.algorithm.family in SCORING_FAMILIES
    has_weights = any((folder / n).is_file() for n in ("config.json", ADAPTER_CONFIG)) or (
        reward_model and (folder / "merged" / "config.json").is_file())
    if not has_weights:
        raise RunFolderError(f"{folder}: no saved model there (expected config.json or {ADAPTER_CONFIG})")
    if checkpoint is None:  # a checkpoint's weights were opened by run.checkpoint (checkpoints.incomplete_reason)
        try:  # chat and export as evaluate: a weights file cut short is one line, not safetensors' traceback at load
            check_weights_readable(folder, flag)
        except RecipeError as e:
            raise RunFolderError(str(e)) from None
    return TrainedModel(run, folder, recipe, reward_model)
