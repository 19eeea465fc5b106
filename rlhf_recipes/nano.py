"""The embedded nano profile's model: a 0.7M-parameter Qwen3 that the project's own SFT recipe teaches the book's task.

Where the tiny profile (rlhf_recipes/tiny.py) proves the plumbing with a random model, nano is for watching the
recipes LEARN the book's task (reasoning-gym spell_backward) on a CPU in minutes. Two cached builds:

  nano-init   a tokenizer fit for the task and a randomly initialised Qwen3 (seconds, deterministic):
              - bytes only (no BPE merges), so every letter of a word is one token: with merges, words split
                into multi-letter pieces and a model this small cannot learn to reverse them (measured at
                lr 1e-3: 0% exact match after 300 SFT steps with a 1024-token BPE, 50% after 125 with bytes);
              - the fixed texts of every prompt as single added tokens: the book's DeepSeekZero system prompt
                (~350 bytes) and the spell_backward question prefix, so a prompt is ~36 tokens, not ~400;
              - the four reasoning tags as single tokens and ChatML, as in tiny (and in Qwen3's tokenizer).
  nano        nano-init after `recipes/nano_sft.yaml` (algorithm sft: the book's chapter 4 stage before RL),
              run through the normal runner in a subprocess, as the first step of the first nano run (the runner's
              prerequisites; `rlhf-recipes nano build` alone; resolving the name never builds it) (~1.5-3 minutes
              on one CPU thread), built to a held-out target (BASE_GOAL below: the checkpoint closest to 20%
              held-out exact match inside [15%, 25%]), so the base is partly competent, the same on every
              machine, and every RL algorithm has room to show what it does.
  nano-sdpo   nano after `recipes/nano_sdpo_sft.yaml`: taught to read SDPO's teacher prompt (a demonstration in
              context, which SDPO presupposes and the nano base cannot do), with replay of nano's own answers so
              its bare-question accuracy stays near nano's; the start of `--profile nano` SDPO runs (~3 minutes,
              built as the first step of the first such run, or by `rlhf-recipes nano build --sdpo`).

All three are keyed by a fingerprint of everything that goes into them (shapes, seed, tokens, template, the SFT
recipe's values, the held-out goal). The two SFT bases SHIP with the checkout (reference_runs/nano/bases/<name>-
<fingerprint>/, ~3 MB each, built once by `rlhf-recipes nano build --sdpo` and copied there by `rlhf-recipes nano
ship`): every machine starts from the same weights, bit for bit (a build to the same target kept step 130 on one
CPU and 132 on another), and a first nano run or a CI run trains no base. A checkout whose recipe or build no longer
matches the shipped fingerprint builds its own under the cache root (tiny.cache_root), where nano-init always is; a
file lock makes concurrent callers wait for one build instead of running the SFT several times. Each SFT build
leaves its record (base_target.json: the measured held-out accuracy, the step kept, the curve, the machine) beside
the model.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from rlhf_recipes.paths import RECIPES_DIR, REFERENCE_RUNS_DIR, REPO_ROOT, recipe_path
from rlhf_recipes.tiny import (
    BUILDING_PREFIX,
    CHAT_TEMPLATE,
    SPECIAL_TOKENS,
    build_cached,
    cache_root,
    save_random_qwen3,
)

logger = logging.getLogger(__name__)

BASE = "nano"  # model_name_or_path of the SFT base that every nano run starts from
SFT_RECIPE = "nano_sft"  # recipes/nano_sft.yaml
SDPO_BASE = "nano-sdpo"  # model_name_or_path of the SDPO nano runs' start (nano + teacher-prompt reading)
SDPO_SFT_RECIPE = "nano_sdpo_sft"  # recipes/nano_sdpo_sft.yaml

TAGS = ["<think>", "</think>", "<answer>", "</answer>"]
QUESTION_PREFIX = "Spell this word backward (example: sun -> nus): "  # reasoning-gym spell_backward's question
SYSTEM_PROMPT = "DeepSeekZero"  # the book's (reasoning_gym.utils.SYSTEM_PROMPTS); its text becomes one token
# The book's task as every nano run has it (3-8 letters, seed 42) is the nano profile's: recipes/profiles/nano.yaml.

# Chosen by measurement (team notes, 1 CPU thread): hidden 128 x 4 layers learns the task from bytes within
# ~125 SFT steps of 64 rows; hidden 64 x 2 (the tiny shape) is too small to reverse words reliably, and
# larger shapes cost generation speed, which bounds every RL recipe on a CPU. Tied embeddings keep the
# ~270-token vocabulary from dominating the parameter count: 0.69M parameters in all.
MODEL_SHAPE = dict(
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=4,
    head_dim=32,
    max_position_embeddings=256,  # prompts are ~36 tokens, completions ~16
    tie_word_embeddings=True,
)
SEED = 0
# The nano base is built to a held-out target, not to a step count (rlhf_recipes/evaluation/target.py): at a fixed
# step on its steep curve (measured 125 / 140 / 145 / 155 steps -> 6 / 12.5 / 21 / 38% held-out exact match) the
# base landed at 21% on one CPU and 14.5% on another. Greedy held-out exact match on the 200 problems of the nano
# tables (the policy-gradient evaluator, recipes/grpo.yaml --profile nano; ~0.4-0.8 s each): every 10 steps while
# the base is below 5% (the first ~120 steps), then every step, because near the target the curve rises ~2 points
# a step and wobbles (measured 12 / 17.5 / 14 / 14 / 18.5 / 16.5 / 19 / 20 / 26.5% at steps 126-134). The
# checkpoint closest to 20% inside [15%, 25%] is kept; the build stops at the first evaluation above 25%. The
# record lands beside the model (evaluation/target.py RECORD).
BASE_GOAL = {"target": 0.20, "band": [0.15, 0.25], "every": 10, "fine_from": 0.05, "fine_every": 1,
             "problems": 200, "metric": "exact_match", "recipe": "grpo", "split": "validation"}
# nano-sdpo trains its fixed 300 steps (its teacher-reading needs them; its bare-question accuracy is flat there,
# 24 / 28 / 24.5% at 100 / 200 / 300 steps, not steep) and is measured once at the end, on the SDPO recipe's
# held-out problems, so its record says where it landed too.
SDPO_BASE_GOAL = {"target": None, "problems": 200, "metric": "exact_match", "recipe": "sdpo"}
_BUILD_VERSION = 1  # bump when the build below changes, to invalidate caches


def _added_tokens() -> list[str]:
    # The system prompt's text straight from reasoning-gym's table (SYSTEM_PROMPT is one of its names), not through
    # data/reasoning_gym.py, which stands above this file.
    from reasoning_gym.utils import SYSTEM_PROMPTS

    return [*TAGS, SYSTEM_PROMPTS[SYSTEM_PROMPT], QUESTION_PREFIX]


def _init_fingerprint() -> str:
    blob = json.dumps([_BUILD_VERSION, MODEL_SHAPE, SEED, SPECIAL_TOKENS, _added_tokens(), CHAT_TEMPLATE])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def build_tokenizer():
    """Bytes only (256 tokens, no merges) + ChatML markers + the task's fixed texts as single tokens."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())  # sorted: the same ids in every process
    tok = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIAL_TOKENS)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                        additional_special_tokens=["<|im_start|>"])
    # normalized=False: matched on the raw text, so the system prompt's own "<think> </think>" cannot split it.
    tokenizer.add_tokens([AddedToken(t, normalized=False) for t in _added_tokens()])
    tokenizer.chat_template = CHAT_TEMPLATE  # ChatML; `enable_thinking` is accepted and ignored, as in tiny
    return tokenizer


def nano_init_path() -> str:
    """The untrained nano model + tokenizer (built on first use, a few seconds)."""
    return build_cached(cache_root() / f"nano-init-{_init_fingerprint()}",
                        lambda folder: save_random_qwen3(folder, build_tokenizer(), MODEL_SHAPE, SEED))


def _sft_fingerprint(recipe_name: str, goal: dict, start_fingerprint: str) -> str:
    """Everything an SFT build depends on: its start's fingerprint, the recipe's values (its data and settings;
    not its comments) and the held-out goal it is built to."""
    import yaml

    recipe = yaml.safe_load(recipe_path(recipe_name).read_text(encoding="utf-8"))
    blob = json.dumps([start_fingerprint, recipe, goal], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def base_fingerprint() -> str:
    """The nano SFT base's: the init model and recipes/nano_sft.yaml."""
    return _sft_fingerprint(SFT_RECIPE, BASE_GOAL, _init_fingerprint())


def sdpo_base_fingerprint() -> str:
    """The nano-sdpo base's: the nano base and recipes/nano_sdpo_sft.yaml."""
    return _sft_fingerprint(SDPO_SFT_RECIPE, SDPO_BASE_GOAL, base_fingerprint())


def run_sft(recipe_name: str, target: Path, goal: dict, overrides: tuple[str, ...] = ()) -> None:
    """`recipes/run.py recipes/RECIPE.yaml --heldout_target GOAL --output_dir TARGET [overrides]`: the normal runner, as
    a user runs it, trained to the held-out target (the recipe key heldout_target, evaluation/target.py), in its own
    process (a run configures logging, seeds and threads for the whole process). The record of what it measured
    lands beside the model."""
    log = target / "build.log"
    command = [sys.executable, str(RECIPES_DIR / "run.py"), str(recipe_path(recipe_name)), "--heldout_target",
               json.dumps(goal), "--output_dir", str(target), *overrides]
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    with open(log, "w", encoding="utf-8") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    if done.returncode != 0:
        tail = "".join(log.read_text(encoding="utf-8").splitlines(keepends=True)[-30:])
        raise RuntimeError(f"building {target.name} failed ({' '.join(command)} exited {done.returncode}):\n{tail}")


def _sft_build(recipe_name: str, goal: dict, target: Path, start_path, what: str) -> str:
    """The SFT recipe's run into `target`, once: cached, built under build_cached's file lock (concurrent callers
    wait and reuse it); `start_path()` builds the recipe's starting model first, outside the lock."""
    if (target / "config.json").exists():
        return str(target)
    start_path()  # before the lock: the SFT subprocess then finds its start cached
    return build_cached(target, lambda folder: run_sft(recipe_name, folder, goal),
                        announce=f"building {what} first (once, then cached): recipes/{recipe_name}.yaml, SFT to its "
                                 f"held-out target -> {target}")


SHIPPED_BASES = REFERENCE_RUNS_DIR / "nano" / "bases"  # the shipped builds, one folder per base (name-fingerprint)
# What a shipped base keeps of its build folder: the model, its tokenizer, and the build's record (resolved recipe,
# training curve, held-out target record); not the logs, the model card or the pickled trainer arguments.
SHIPPED_FILES = ("model.safetensors", "config.json", "generation_config.json", "tokenizer.json",
                 "tokenizer_config.json", "chat_template.jinja", "config.yaml", "metrics.jsonl",
                 "final_results.json", "base_target.json")


def _build_folder(name: str) -> Path:
    """The shipped build when the checkout holds the current one, else the cache's (built there when missing)."""
    shipped = SHIPPED_BASES / name
    return shipped if (shipped / "config.json").exists() else cache_root() / name


def _base_dir() -> Path:
    return _build_folder(f"nano-sft-{base_fingerprint()}")


def _sdpo_base_dir() -> Path:
    return _build_folder(f"nano-sdpo-{sdpo_base_fingerprint()}")


def nano_model_path() -> str:
    """The nano SFT base (model + tokenizer + the SFT run's record), BUILT here when missing (~1-2 min of training)
    and cached: the runner's prerequisite step, `rlhf-recipes nano build`, the tools and tests call it."""
    return _sft_build(SFT_RECIPE, BASE_GOAL, _base_dir(), nano_init_path, "the nano base")


def nano_sdpo_model_path() -> str:
    """The nano-sdpo base (nano taught to read SDPO's teacher prompt), BUILT here when missing (~3 min) and cached."""
    return _sft_build(SDPO_SFT_RECIPE, SDPO_BASE_GOAL, _sdpo_base_dir(), nano_model_path, "the nano SDPO base")


BUILDS = {BASE: nano_model_path, SDPO_BASE: nano_sdpo_model_path}  # the bases a run's model may name


def build_missing_bases(model_name: str | None) -> None:
    """The runner's prerequisite step: the nano base a run starts from, built once if it is missing (announced)."""
    if model_name in BUILDS:
        BUILDS[model_name]()


def built_base_path(model_name: str) -> str:
    """Where a nano base is, once built; resolving its name never trains one: a missing base is a one-line error."""
    folder = {BASE: _base_dir, SDPO_BASE: _sdpo_base_dir}[model_name]()
    if not (folder / "config.json").exists():
        from rlhf_recipes.errors import RecipeError

        raise RecipeError(f"the {model_name} base is not built yet ({folder}); `rlhf-recipes nano build"
                          f"{' --sdpo' if model_name == SDPO_BASE else ''}` builds it (~2-4 minutes, once), as a "
                          f"--profile nano run does before it starts")
    return str(folder)


def ship_bases() -> list[Path]:
    """Copy both bases' current builds (built first where missing) into SHIPPED_BASES, replacing the shipped ones:
    what a maintainer runs, and commits, after a change to a base's recipe or build. Paths in the resolved recipe
    are written relative to the checkout, as in every shipped run."""
    shipped = []
    builds = {"nano-sft": nano_model_path(), "nano-sdpo": nano_sdpo_model_path()}  # the current fingerprints
    for prefix, built in builds.items():
        built = Path(built)
        target = SHIPPED_BASES / built.name
        for stale in SHIPPED_BASES.glob(f"{prefix}-*"):
            if stale != target:
                shutil.rmtree(stale)
        if built == target:  # already the shipped one
            shipped.append(target)
            continue
        target.mkdir(parents=True, exist_ok=True)
        for name in SHIPPED_FILES:
            shutil.copyfile(built / name, target / name)
        resolved = target / "config.yaml"
        # the build ran in a temporary folder (tiny.build_cached) that the resolved recipe names as its output_dir
        # (mkdtemp's name is letters, digits and _: a "-rerun" after it, in the header's re-run command, stays)
        text = re.sub(rf"\S*/{re.escape(BUILDING_PREFIX)}\w+", str(target.relative_to(REPO_ROOT)),
                      resolved.read_text())
        resolved.write_text(text.replace(f"{REPO_ROOT}/", ""))
        shipped.append(target)
    return shipped


def cli(argv: list[str] | None = None) -> int:
    """`rlhf-recipes nano build [--sdpo]` builds the nano bases now, if missing; `nano ship` copies them to the repo.

    build: the nano base (with --sdpo also the nano-sdpo base), and print where each is. Every --profile nano run does
    this first; this runs it alone (e.g. before a sweep). ship: copy both builds into the checkout
    (reference_runs/nano/bases/) for a commit."""
    import argparse

    parser = argparse.ArgumentParser(prog="rlhf-recipes nano", description=cli.__doc__.split("\n")[0])
    parser.add_argument("action", choices=["build", "ship"],
                        help="build: the nano bases a --profile nano run starts from (the shipped ones where current); "
                             "ship: copy both builds into reference_runs/nano/bases/ (maintainers, then commit)")
    parser.add_argument("--sdpo", action="store_true", help="also the nano-sdpo base (SDPO's nano runs start there)")
    args = parser.parse_args(argv)
    if args.action == "ship":
        for folder in ship_bases():
            print(f"shipped {folder}")
        return 0
    print(f"{BASE}: {nano_model_path()}")
    if args.sdpo:
        print(f"{SDPO_BASE}: {nano_sdpo_model_path()}")
    return 0


if __name__ == "__main__":
    sys.exit(cli())
