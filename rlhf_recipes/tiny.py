"""The embedded tiny profile's model and tokenizer, built locally and deterministically.

The Hugging Face Hub is unreachable in CI, so tests cannot download even a small model.
Instead we train a byte-level BPE tokenizer on the text of the shipped fixtures and
initialise a 2-layer Qwen3 with a fixed seed. The result is cached on disk keyed by a hash
of everything that goes into it, so every process (and every test) after the first reuses
the same files. Building takes a few seconds.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Callable

FIXTURES = Path(__file__).parent / "data" / "fixtures"

# Reasoning tags and ChatML markers are single tokens, as in Qwen3's real tokenizer, so a
# 2-layer model can learn the output format within a few CPU steps.
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADDED_TOKENS = ["<think>", "</think>", "<answer>", "</answer>", "\n<step>\n"]

MODEL_SHAPE = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=2048,
    tie_word_embeddings=True,
)
VOCAB_SIZE = 768
SEED = 0
_BUILD_VERSION = 1  # bump when the recipe below changes, to invalidate caches

# ChatML, like Qwen3's template but without tool calls; `enable_thinking` is accepted and
# ignored (the tiny model has no thinking mode to switch).
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"
)


def _corpus() -> list[str]:
    """Every string in the shipped fixtures, in a fixed order."""
    texts: list[str] = []

    def walk(value):
        if isinstance(value, str):
            texts.append(value)
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    for path in sorted(FIXTURES.rglob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                walk(json.loads(line))
    # Letters in both cases and digits so reasoning-gym words always tokenize compactly.
    texts.append("abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ 0123456789")
    return texts


def cache_root() -> Path:
    return Path(os.environ.get("RLHF_RECIPES_CACHE", Path.home() / ".cache" / "rlhf-recipes"))


def _build(target: Path, corpus: list[str]) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
    )
    tokenizer.add_tokens(ADDED_TOKENS)
    tokenizer.chat_template = CHAT_TEMPLATE
    save_random_qwen3(target, tokenizer, MODEL_SHAPE, SEED)


def save_random_qwen3(target: Path, tokenizer, shape: dict, seed: int) -> None:
    """A Qwen3 of `shape` with seeded random weights, sized to `tokenizer`, saved with it into `target`."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    config = Qwen3Config(vocab_size=len(tokenizer), bos_token_id=None, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, **shape)
    model = Qwen3ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)


BUILDING_PREFIX = ".building-"  # a build in progress: renamed to its target once complete


def build_cached(target: Path, build: Callable[[Path], None], announce: str = "") -> str:
    """`target`, built by `build(folder)` unless it already holds a model (config.json).

    Built once even when several processes ask at once (parallel test workers, the ranks of a launch): the first
    takes a file lock beside `target` and builds; the others wait on the lock and reuse its build. The build goes
    into a temporary directory renamed into place, so a build killed halfway leaves no half-written `target`.
    `announce`, when given, is printed to stderr by the process that builds (not by those that wait).
    """
    from filelock import FileLock

    if (target / "config.json").exists():
        return str(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if (target / "config.json").exists():  # built by another process while this one waited
            return str(target)
        if announce:
            print(announce, file=sys.stderr, flush=True)
        tmp = Path(tempfile.mkdtemp(prefix=BUILDING_PREFIX, dir=target.parent))
        try:
            build(tmp)
            os.rename(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return str(target)


def tiny_model_path() -> str:
    """Path of the tiny model + tokenizer directory, building it on first use."""
    corpus = _corpus()
    # keyed by everything that goes into the build
    h = hashlib.sha256(json.dumps([_BUILD_VERSION, MODEL_SHAPE, VOCAB_SIZE, SEED, SPECIAL_TOKENS, ADDED_TOKENS,
                                   CHAT_TEMPLATE]).encode())
    for t in corpus:
        h.update(t.encode("utf-8"))
    return build_cached(cache_root() / f"tiny-qwen3-{h.hexdigest()[:16]}", lambda folder: _build(folder, corpus))


if __name__ == "__main__":
    print(tiny_model_path())
