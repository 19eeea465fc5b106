"""Checks that need the model's shape but not its weights: LoRA settings, sequence lengths, quantization.

The shape comes from the model's config.json (a local folder, or the hub cache), or for the embedded
models from their MODEL_SHAPE (tiny.py, nano.py), so nothing here downloads or builds a model. Only the
LoRA target check imports transformers: it builds the model on the meta device (no memory, no weights)
to list its module names, and only when a recipe names its own targets.

Each failure is a RecipeError naming the key and the fix, raised before any model loads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rlhf_recipes.errors import RecipeError


def model_config(name: str | None) -> dict[str, Any] | None:
    """The model's config.json as a dict, or None where it cannot be read without a download."""
    if not name:
        return None
    from rlhf_recipes.models import EMBEDDED, TINY

    if name in EMBEDDED:
        if name == TINY:
            from rlhf_recipes.tiny import MODEL_SHAPE
        else:  # every nano model
            from rlhf_recipes.nano import MODEL_SHAPE
        return {"model_type": "qwen3", **MODEL_SHAPE}
    folder = Path(name).expanduser()
    path = folder / "config.json" if folder.is_dir() else None
    if path is None:
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(name, "config.json")
        except Exception:  # a malformed repo id: the model check reports it
            return None
        path = Path(cached) if isinstance(cached, str) else None
    if path is None or not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except ValueError:
        return None


def positions_of(config: dict[str, Any] | None) -> int | None:
    """How many positions the model has (max_position_embeddings, or the names older configs use)."""
    if not config:
        return None
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = config.get(key) or (config.get("text_config") or {}).get(key)
        if isinstance(value, int) and value > 0:
            return value
    return None


def check_quantization(recipe) -> None:
    """4/8-bit weights cannot be trained themselves: they need LoRA adapters on top (QLoRA)."""
    for key in ("load_in_4bit", "load_in_8bit"):
        if getattr(recipe.model, key) and not recipe.model.use_peft:
            raise RecipeError(f"{recipe.where(key)}: quantized weights cannot be trained directly; set "
                              "`use_peft: true` (QLoRA: LoRA adapters on the quantized model) or drop "
                              f"`{key}`")


def check_lengths(recipe, config: dict[str, Any] | None) -> None:
    """A length setting past the model's positions: the model would read positions it never learnt."""
    positions = positions_of(config)
    if positions is None:
        return
    name = recipe.model.model_name_or_path
    for key in ("max_length", "max_prompt_length", "max_completion_length"):
        value = recipe.setting(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > positions:
            raise RecipeError(f"{recipe.where(key)} is {value}, more than the {positions} positions of `{name}` "
                              f"(max_position_embeddings in its config.json); set it to at most {positions}")


def check_prompt_positions(recipe, tokenizer, dataset, config: dict[str, Any] | None = None) -> None:
    """Policy gradients: TRL does not truncate prompts, so the longest prompt plus the completion budget must
    fit the model's positions. Runs once the tokenizer and data are loaded, before the model is."""
    positions = positions_of(config if config is not None else model_config(recipe.model.model_name_or_path))
    budget = recipe.training.max_completion_length
    if positions is None or not isinstance(budget, int) or dataset is None or "prompt" not in dataset.column_names:
        return
    longest, row = 0, None
    for i, prompt in enumerate(dataset["prompt"]):
        if isinstance(prompt, list):
            ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True)
            n = len(ids["input_ids"] if hasattr(ids, "keys") else ids)  # transformers 5: a BatchEncoding
        else:
            n = len(tokenizer(prompt)["input_ids"])
        if n > longest:
            longest, row = n, i
    if longest + budget > positions:
        raise RecipeError(
            f"{recipe.where('max_completion_length')}: the longest prompt (row {row}, {longest} tokens) plus "
            f"max_completion_length {budget} exceeds the {positions} positions of "
            f"`{recipe.model.model_name_or_path}`; lower max_completion_length to at most "
            f"{max(positions - longest, 0)} or filter the long prompts out of the data")


def check_lora(recipe, config: dict[str, Any] | None) -> None:
    """lora_target_modules that the model does not have: PEFT would raise deep inside the model's load."""
    if not recipe.model.use_peft:
        return
    targets = recipe.model.lora_target_modules
    if isinstance(targets, str):  # ModelConfig's __post_init__ makes a one-name list the bare name
        targets = [targets]
    if not isinstance(targets, (list, tuple)) or not targets or "all-linear" in targets or config is None:
        return
    names = module_names(config)
    if names is None:
        return
    # PEFT matches a target against the end of a module's dotted name: its last part is what a recipe names.
    missing = [t for t in targets if not any(n == t or n.endswith(f".{t}") for n in names)]
    if missing:
        leaves = sorted({n.rsplit(".", 1)[-1] for n in names})
        raise RecipeError(f"{recipe.where('lora_target_modules')}: `{recipe.model.model_name_or_path}` has no "
                          f"module {', '.join(missing)}; its linear layers are {', '.join(leaves)} (or use "
                          "all-linear)")


def module_names(config: dict[str, Any]) -> list[str] | None:
    """The dotted names of the model's linear layers, from a model built on the meta device (no weights)."""
    try:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        kwargs = {k: v for k, v in config.items() if k != "model_type"}
        built = AutoConfig.for_model(config["model_type"], **kwargs)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(built)
    except Exception:  # an architecture transformers cannot build from its config alone: PEFT will judge
        return None
    return [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) or type(m).__name__ == "Conv1D"]


def check_model_settings(recipe) -> None:
    """Everything here that needs only settings and the model's config (called by validation.check_inputs)."""
    check_quantization(recipe)
    config = model_config(recipe.model.model_name_or_path)
    check_lengths(recipe, config)
    check_lora(recipe, config)


WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json", "adapter_model.safetensors")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")


def check_model_folder(path: str, flag: str, *, tokenizer: bool = True, chat_template: bool = False) -> None:
    p = Path(path).expanduser()
    if not p.is_dir():
        raise RecipeError(f"{flag}: no such model folder {path}. Give a folder written by save_pretrained (a run's "
                          "output_dir) or a hub id such as Qwen/Qwen3-0.6B")
    if not (p / "config.json").exists() and not (p / "adapter_config.json").exists():
        raise RecipeError(f"{flag}: {path} has no config.json: it is not a saved model (a run's output_dir or a "
                          "checkpoint-N folder is)")
    if not any((p / f).exists() for f in WEIGHT_FILES):
        raise RecipeError(f"{flag}: {path} has no weights ({' or '.join(WEIGHT_FILES[:3])}): the save did not "
                          "finish, or this is a config-only folder")
    if tokenizer and not any((p / f).exists() for f in TOKENIZER_FILES):
        raise RecipeError(f"{flag}: {path} has no tokenizer files ({', '.join(TOKENIZER_FILES)}); save the tokenizer "
                          "with the model (tokenizer.save_pretrained)")
    if chat_template and not _has_chat_template(p):
        raise RecipeError(f"{flag}: the tokenizer in {path} has no chat template, which this algorithm needs to "
                          "format conversations. Use a chat (instruct/SFT) model or add a chat_template")


def _has_chat_template(folder: Path) -> bool:
    if (folder / "chat_template.jinja").exists() or (folder / "chat_template.json").exists():
        return True
    config = folder / "tokenizer_config.json"
    return config.exists() and bool(json.loads(config.read_text()).get("chat_template"))
