"""Checks that run before any model or dataset loads, so a mistake costs seconds, not a download.

- values: numbers out of their range (a learning rate of 0, a negative beta, a batch of 0, ...);
- data: a local `data_files` file exists, is not empty, parses, and its first rows have the
  source's columns and pass its adapter (the same `normalize` the run uses);
- models: a local model folder has a config, weights and a tokenizer (and a chat template where
  the family needs one); a hub id is in the local cache when the hub is offline or unreachable;
  every `rm:` reward model names a saved model;
- the machine (rlhf_recipes/preflight.py): the optional packages, wandb's login, a GPU for a real run, the disk.
Each failure is a RecipeError whose message names where the value came from, what was expected
and the fix. Nothing here imports transformers or datasets, nor torch except to ask a real run's GPU.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Callable, Iterator

from rewards.reward_model import RM_PREFIX
from rewards.reward_model_files import full_model
from rlhf_recipes.errors import RecipeError
from rlhf_recipes.hub import hub_offline, hub_online
from rlhf_recipes.model_checks import check_model_folder, check_model_settings

# key -> (test, what is expected). Applied to the keys an algorithm's config has; None values are skipped.
Rule = tuple[Callable[[Any], bool], str]
RANGES: dict[str, Rule] = {
    "learning_rate": (lambda v: v > 0, "a positive number (e.g. 5e-6)"),
    "beta": (lambda v: v >= 0, "a number >= 0"),
    "max_steps": (lambda v: v == -1 or v > 0, "a positive number of optimizer steps (or -1: use num_train_epochs)"),
    "num_train_epochs": (lambda v: v > 0, "a positive number of epochs"),
    "per_device_train_batch_size": (lambda v: v >= 1, "at least 1"),
    "per_device_eval_batch_size": (lambda v: v >= 1, "at least 1"),
    "effective_batch_size": (lambda v: v >= 1, "at least 1"),
    "gradient_accumulation_steps": (lambda v: v >= 1, "at least 1"),
    "generation_batch_size": (lambda v: v >= 1, "at least 1"),
    "num_generations": (lambda v: v >= 1, "at least 1 completion per prompt"),
    "num_samples": (lambda v: v >= 1, "at least 1 row"),
    "eval_fraction": (lambda v: 0 <= v < 1, "a fraction in [0, 1)"),
    "max_grad_norm": (lambda v: v >= 0, "a number >= 0 (0 turns clipping off)"),
    "weight_decay": (lambda v: v >= 0, "a number >= 0"),
    "warmup_steps": (lambda v: v >= 0, "a number >= 0 (a float < 1 is a fraction of the steps)"),
    "warmup_ratio": (lambda v: 0 <= v <= 1, "a fraction in [0, 1]"),
    "epsilon": (lambda v: v > 0, "a positive clip range (the book's 0.2)"),
    "epsilon_high": (lambda v: v > 0, "a positive clip range"),
    "cliprange_value": (lambda v: v > 0, "a positive clip range (the book's 0.4)"),
    "temperature": (lambda v: v > 0, "a positive sampling temperature"),
    "top_p": (lambda v: 0 < v <= 1, "a probability in (0, 1]"),
    "top_k": (lambda v: v >= 0, "an integer >= 0 (0 turns it off)"),
    "min_p": (lambda v: 0 <= v <= 1, "a probability in [0, 1]"),
    "max_length": (lambda v: v >= 1, "at least 1 token"),
    "max_prompt_length": (lambda v: v >= 1, "at least 1 token"),
    "max_completion_length": (lambda v: v >= 1, "at least 1 token"),
    "label_smoothing": (lambda v: 0 <= v < 0.5, "a fraction in [0, 0.5)"),
    "logging_steps": (lambda v: v > 0, "a positive number"),
    "save_steps": (lambda v: v > 0, "a positive number"),
    "eval_steps": (lambda v: v > 0, "a positive number"),
    "gamma": (lambda v: 0 <= v <= 1, "a discount in [0, 1]"),
    "lam": (lambda v: 0 <= v <= 1, "a GAE lambda in [0, 1]"),
    "vf_coef": (lambda v: v >= 0, "a number >= 0"),
    "seed": (lambda v: 0 <= v <= 2**32 - 1, "an integer in [0, 4294967295] (numpy seeds are 32-bit)"),
    "lora_r": (lambda v: v >= 1, "a LoRA rank of at least 1 (e.g. 16)"),
    "eval_every": (lambda v: v >= 0, "a number of optimizer steps >= 0 (0 turns periodic evaluation off)"),
    "eval_problems": (lambda v: v >= 1, "at least 1 held-out problem"),
    "torch_threads": (lambda v: v >= 1, "a number of CPU threads >= 1 (leave it unset for torch's own choice)"),
}


def check_ranges(values: dict[str, Any], origin: dict[str, str]) -> None:
    for key, (test, expected) in RANGES.items():
        value = values.get(key)
        if value is None or isinstance(value, (bool, str, list, dict)):
            continue
        if isinstance(value, float) and not math.isfinite(value) or not test(value):
            raise RecipeError(f"{origin.get(key, 'recipe')}: `{key}` must be {expected}, got {value!r}")


# --------------------------------------------------------------------------------------
# Data


TEXT_COLUMNS = frozenset({"prompt", "chosen", "rejected", "completion", "question", "answer", "messages"})


def check_local_data(path: str, source, flag: str) -> None:
    """A data_files file, every row of it: exists, has rows, each is UTF-8 and parses, has the source's columns,
    no empty text, and passes the adapter (the same `normalize` the run uses). The file is streamed, so a 100k-row
    file takes about a second (`python -m benchmarks.integrity` measures it). The first bad row is a RecipeError
    naming the file, its 1-based line (`row N` in a JSON array), the column and the fix."""
    p = Path(path)
    if not p.is_file():
        raise RecipeError(f"{flag}: no such file {path}. Give a JSON or JSONL file in the `{source.name}` schema "
                          f"(columns {', '.join(source.columns)})")
    count = 0
    required, text = source.columns, [c for c in source.columns if c in TEXT_COLUMNS]
    for where, row in _rows(p, flag, source):
        count += 1
        # The common case in a few dict lookups; the messages are built only for the row that fails.
        if not isinstance(row, dict) or any(c not in row for c in required) or any(_empty_text(row[c]) for c in text):
            _check_row(row, source, f"{flag}: {path} {where}")
        if source.normalize is not None:
            try:
                source.normalize(row)
            except (KeyError, TypeError, ValueError) as e:
                raise RecipeError(f"{flag}: {path} {where}: {e}") from None
    if not count:
        raise RecipeError(f"{flag}: {path} is empty. It needs rows with columns {', '.join(source.columns)}")


def _check_row(row: Any, source, where: str) -> None:
    columns = ", ".join(source.columns)
    if not isinstance(row, dict):
        raise RecipeError(f"{where}: expected a JSON object with columns {columns}, got {type(row).__name__}")
    missing = [c for c in source.columns if c not in row]
    if missing:
        raise RecipeError(f"{where}: missing column(s) {', '.join(missing)} for dataset `{source.name}` (expected "
                          f"{columns}; found {', '.join(row)})")
    for column in source.columns:
        problem = _empty_text(row[column]) if column in TEXT_COLUMNS else None
        if problem:
            raise RecipeError(f"{where}: column `{column}`: {problem}; fill it in or remove the row (a model trained "
                              "on it learns to answer with nothing)")


def _empty_text(value: Any) -> str | None:
    """What is empty in a text column: the text itself, or an assistant's reply in a list of messages."""
    if type(value) is str:
        return None if value and not value.isspace() else "the text is empty"
    if type(value) is list:
        for message in value:
            if type(message) is dict and message.get("role") == "assistant":
                content = message.get("content")
                if type(content) is str and (not content or content.isspace()):
                    return "the assistant's reply is empty"
    return None


def _rows(path: Path, flag: str, source) -> Iterator[tuple[str, Any]]:
    """("line N" or "row N", parsed row) for every row of a JSONL file (streamed) or a JSON array; 1-based."""
    with path.open("rb") as f:
        head = f.read(4096)
    if path.suffix == ".json" and head.lstrip().startswith(b"["):
        text = _utf8(path.read_bytes(), flag, path)
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise RecipeError(f"{flag}: {path} line {e.lineno}, column {e.colno}: not valid JSON ({e.msg}). Fix "
                              "that spot, or give one JSON object per line (JSONL)") from None
        yield from ((f"row {i}", row) for i, row in enumerate(data, start=1))
        return
    with path.open("rb") as f:
        for number, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            cut = not raw.endswith(b"\n")  # only the last line can lack its newline
            try:
                line = _utf8(raw, flag, path, number)
                row = json.loads(line)
            except RecipeError:
                if cut and raw.rstrip()[-1:] >= b"\x80":  # ends inside a multi-byte character: cut, not mis-encoded
                    raise RecipeError(f"{flag}: {path} line {number}{CUT_OFF}") from None
                raise
            except json.JSONDecodeError as e:
                # Cut off: the line is the start of a valid object, so parsing fails at its end (or in a string that
                # runs to its end). A last line that merely lacks its newline fails earlier, like any other.
                ends = e.pos >= len(line.rstrip()) - 1 or e.msg.startswith("Unterminated string")
                problem = CUT_OFF if cut and ends else _json_problem(e, line, number, source)
                raise RecipeError(f"{flag}: {path} line {number}{problem}") from None
            yield Line(number), row


class Line(int):
    """A JSONL row's 1-based line number, which reads as `line N` in a message (formatted only on an error)."""

    def __str__(self) -> str:
        return f"line {int(self)}"


def _utf8(data: bytes, flag: str, path: Path, number: int | None = None) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        if number is None:  # a whole JSON file: say on which line
            number = data.count(b"\n", 0, e.start) + 1
            column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        else:
            column = e.start + 1
        raise RecipeError(f"{flag}: {path} line {number}, column {column}: byte {data[e.start:e.start + 1].hex()} is "
                          "not UTF-8. Save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8 IN > OUT)") from None


CUT_OFF = (" is cut off: the file ends in the middle of a JSON object (an interrupted download or copy?). Get the "
           "whole file again, or delete that last line")


def _json_problem(error: json.JSONDecodeError, line: str, number: int, source) -> str:
    """Why a JSONL line does not parse, and the fix: a CSV header, or a syntax error at a column."""
    text = line.strip()
    if number == 1 and "," in text and not text.startswith(("{", "[")):
        header = [c.strip().strip('"') for c in text.split(",")]
        if set(source.columns) & set(header):
            return (f" is a CSV header ({text[:80]}), not a JSON object: this is a CSV file. Convert it to JSONL, "
                    "one object per line (e.g. pandas.read_csv(IN).to_json(OUT, orient='records', lines=True))")
    column = min(error.pos, len(line.rstrip("\r\n"))) + 1  # the line's own newline is not a column
    return (f", column {column}: not valid JSON ({error.msg}). JSONL wants one JSON object per line; fix that spot "
            "or remove the line")


# --------------------------------------------------------------------------------------
# Models


def looks_local(name: str) -> bool:
    return name.startswith((".", "/", "~")) or name.count("/") > 1 or Path(name).exists()


def check_hub_model(name: str, flag: str) -> None:
    """A hub id: fine online; offline (or unreachable) it must already be in the local cache."""
    offline = hub_offline()
    if hub_online():
        return
    from huggingface_hub import try_to_load_from_cache

    if isinstance(try_to_load_from_cache(name, "config.json"), str):
        if not offline:  # cached, hub unreachable: use the cache without waiting on retries
            os.environ["HF_HUB_OFFLINE"] = "1"
        return
    why = "HF_HUB_OFFLINE is set" if offline else "the Hugging Face hub cannot be reached from this machine"
    raise RecipeError(f"{flag}: `{name}` is not in the local model cache and {why}. Download it where the hub is "
                      f"reachable (hf download {name}) and copy the cache, or pass a local folder")


def check_hub_dataset(hub_id: str, flag: str) -> None:
    """A hub dataset: fine online; offline (or unreachable) it must already be in the local hub cache."""
    offline = hub_offline(datasets=True)
    if hub_online(datasets=True):
        return
    from huggingface_hub.constants import HF_HUB_CACHE

    if (Path(HF_HUB_CACHE) / f"datasets--{hub_id.replace('/', '--')}").is_dir():
        return
    why = "the hub is offline (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE)" if offline else \
        "the Hugging Face hub cannot be reached from this machine"
    raise RecipeError(f"{flag}: dataset `{hub_id}` is not in the local cache and {why}. Download it where the hub "
                      f"is reachable (hf download --repo-type dataset {hub_id}) and copy the cache, or give a local "
                      "file in the same schema with --data_files")


def check_model(name: str | None, flag: str, chat_template: bool = False) -> None:
    if name is None:
        raise RecipeError(f"{flag}: no model given; set `model_name_or_path` to a hub id or a saved model folder")
    from rlhf_recipes.models import EMBEDDED

    if name in EMBEDDED:  # built locally on first use (tiny.py, nano.py)
        return
    if looks_local(name):
        check_model_folder(name, flag, chat_template=chat_template)
    else:
        check_hub_model(name, flag)


def check_value_model(recipe) -> None:
    """PPO's value_model_path: a hub id, a saved model, or a reward-model run (its merged/ copy for a LoRA run, which
    the value model loads as `rm:` rewards do)."""
    name = recipe.setting("value_model_path")
    if not name:
        return
    flag = recipe.where("value_model_path")
    if not looks_local(name):
        check_hub_model(name, flag)
        return
    check_run_model(name, flag, f"no such folder {name}. Name a saved model or a reward-model run's output_dir (e.g. "
                                "outputs/hh_rm), or leave it null for a copy of the policy", tokenizer=False)


def check_token_classifiers(recipe) -> None:
    """An ORM, a PRM and PPO's separate value model load as AutoModelForTokenClassification: a model type transformers
    has no such class for (OLMo, OLMo-2, OLMo-3) failed after the policy and its reference had loaded."""
    from rlhf_recipes.model_checks import model_config
    from rlhf_recipes.registry import family_of

    for key in family_of(recipe.algorithm).token_classifiers(recipe):
        name = str(recipe.setting(key) if key != "model_name_or_path" else recipe.model.model_name_or_path)
        try:
            model_type = (model_config(full_model(name)) or {}).get("model_type")
        except ValueError:  # no full model in that folder: check_model / check_value_model name it
            continue
        from transformers.models.auto.modeling_auto import MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES

        if model_type is not None and model_type not in MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES:
            fix = ("set share_value_backbone: true (the value head on the policy's own backbone) or give "
                   "value_model_path a model that has one" if recipe.has("share_value_backbone") else
                   "pick a base model whose type has one (Qwen3, Llama, Qwen2, ...)")
            raise RecipeError(f"{recipe.where(key)}: `{name}` is a {model_type} model, and transformers has no "
                              f"token-classification class for {model_type} (the per-token score this run trains); "
                              f"{fix}")


def check_rollout_backend(recipe) -> None:
    """A policy-gradient or PPO recipe's rollout_backend: its package, a GPU, and model settings it cannot honour."""
    name = recipe.setting("rollout_backend")
    if name is None:  # not a policy-gradient recipe
        return
    from custom_losses.policy_gradient.rollout_backends import environment_problem

    try:
        problem = environment_problem(name, dtype=recipe.model.dtype, bf16=bool(recipe.setting("bf16")),
                                      load_in_8bit=bool(recipe.model.load_in_8bit))
    except ValueError as e:  # an unknown name
        raise RecipeError(f"{recipe.where('rollout_backend')}: {e}") from None
    if problem:
        raise RecipeError(f"{recipe.where('rollout_backend')} `{name}` {problem}")


# --------------------------------------------------------------------------------------
# All of it, for one recipe


def check_inputs(recipe) -> None:
    """Everything a run reads, checked before anything loads: data file, model, reward models."""
    from rlhf_recipes.data.sources import SOURCES
    from rlhf_recipes.preflight import (accelerator_finding, check_output_dir, disk_finding, extras_findings,
                                        stop_at_first, wandb_finding)
    from rlhf_recipes.registry import family_of

    args = recipe.args
    # The optional packages the run needs (pyproject.toml's extras) and wandb's login (rlhf_recipes/preflight.py).
    stop_at_first([*extras_findings(recipe), wandb_finding(recipe)])
    check_rollout_backend(recipe)
    check_output_dir(recipe)
    source = SOURCES.get(args.dataset)
    if args.data_files and source is not None:
        check_local_data(args.data_files, source, recipe.where("data_files"))
    elif source is not None and source.generate is None and not recipe.tiny:
        check_hub_dataset(args.dataset_name or source.hub_id, recipe.where("dataset_name" if args.dataset_name
                                                                          else "dataset"))
    check_model(recipe.model.model_name_or_path, recipe.where("model_name_or_path"),
                chat_template=family_of(recipe.algorithm).needs_chat_template)
    check_value_model(recipe)
    check_token_classifiers(recipe)
    check_model_settings(recipe)  # quantization without LoRA, lengths past the model's positions, LoRA targets
    check_rewards(recipe)
    # Last: a user's mistake above is named first, whatever machine it is found on.
    stop_at_first([accelerator_finding(recipe), disk_finding(recipe)])


def check_rewards(recipe) -> None:
    """The reward functions' names, and every learned reward model (`rm:` folders, a scorer's model) the run loads."""
    names = recipe.setting("reward_funcs") or []
    if names:
        import rewards

        try:
            rewards.check_names(list(names))
        except ValueError as e:
            raise RecipeError(f"{recipe.where('reward_funcs')}: {e}") from None
    for spec in names:
        if isinstance(spec, str) and spec.startswith(RM_PREFIX):
            check_reward_model(spec[len(RM_PREFIX):], recipe.where("reward_funcs"))
    scorer = recipe.setting("reward_model")  # a config's reward model, not a reward function (rejection sampling)
    if isinstance(scorer, str) and recipe.setting("reward_func") is None:  # a verifier replaces it (nano)
        if scorer.startswith(RM_PREFIX):
            check_reward_model(scorer[len(RM_PREFIX):], recipe.where("reward_model"))
        else:
            check_model(scorer, recipe.where("reward_model"))


def check_reward_model(path: str, flag: str) -> None:
    """`rm:<path>`: a reward-model run's output_dir (its merged/ copy for a LoRA run) or a saved model folder."""
    check_run_model(path, flag, f"reward model `rm:{path}`: no such folder. Train one first (e.g. python "
                                "recipes/run.py recipes/hh_rm.yaml) and name its output_dir",
                    label=f"{flag} (rm:{path})")


def check_run_model(path: str, flag: str, missing: str, label: str | None = None, tokenizer: bool = True) -> None:
    """A local folder holding a full model: a run's output_dir (its merged/ copy for a LoRA run) or a saved model.
    `missing`: what to say when there is no such folder."""
    if not Path(path).expanduser().is_dir():
        raise RecipeError(f"{flag}: {missing}")
    try:
        model_dir = full_model(path)
    except ValueError as e:
        raise RecipeError(f"{flag}: {e}") from None
    check_model_folder(model_dir, label or flag, tokenizer=tokenizer)
