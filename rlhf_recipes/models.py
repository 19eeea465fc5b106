"""Tokenizer and model loading: hub ids for real recipes, the built embedded models for `--profile tiny|nano`."""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

TINY = "tiny"
NANO, NANO_INIT = "nano", "nano-init"  # the nano SFT base and its untrained start (rlhf_recipes/nano.py)
NANO_SDPO = "nano-sdpo"  # the nano base taught to read SDPO's teacher prompt (rlhf_recipes/nano.py)
EMBEDDED = (TINY, NANO, NANO_INIT, NANO_SDPO)  # names built locally, never looked up on the hub


def resolve_model_path(name: str | None) -> str:
    if name is None:
        raise ValueError("the recipe sets no `model_name_or_path`")
    if name == TINY:
        from rlhf_recipes.tiny import tiny_model_path

        return tiny_model_path()
    if name in (NANO, NANO_SDPO):  # trained bases: built by the runner's prerequisite step, only found here
        from rlhf_recipes.nano import built_base_path

        return built_base_path(name)
    if name == NANO_INIT:  # a random init (seconds, no training): built on first use
        from rlhf_recipes.nano import nano_init_path

        return nano_init_path()
    return name


def load_tokenizer(model_args):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(
        resolve_model_path(model_args.model_name_or_path), revision=model_args.model_revision
    )
    if tokenizer.pad_token is None:
        logger.warning("tokenizer has no pad token; using its eos token %r", tokenizer.eos_token)
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def model_init_kwargs(model_args) -> dict:
    """from_pretrained kwargs from TRL's ModelConfig: dtype, attention, 4/8-bit quantization."""
    import torch
    from trl import get_quantization_config

    kwargs = dict(
        revision=model_args.model_revision,
        attn_implementation=model_args.attn_implementation,
        dtype=model_args.dtype if model_args.dtype in (None, "auto") else getattr(torch, model_args.dtype),
    )
    quantization = get_quantization_config(model_args)
    if quantization is not None:
        kwargs["quantization_config"] = quantization
        from transformers.integrations import is_deepspeed_zero3_enabled

        # Quantized weights are placed at load time, one GPU per process; under ZeRO-3 DeepSpeed places them, and
        # transformers refuses any device_map there ("DeepSpeed Zero-3 is not compatible with passing a device_map").
        if torch.cuda.is_available() and not is_deepspeed_zero3_enabled():
            from accelerate import PartialState

            kwargs["device_map"] = {"": PartialState().local_process_index}
    return kwargs


def load_causal_lm(model_args):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(
        resolve_model_path(model_args.model_name_or_path), **model_init_kwargs(model_args)
    )


def copy_chat_template(tokenizer, source: str) -> None:
    """Set `tokenizer.chat_template` to that of the tokenizer at `source`: nothing else changes
    (no tokens added, no embedding resize), as the book does for OLMo-2 base."""
    from transformers import AutoTokenizer

    donor = AutoTokenizer.from_pretrained(resolve_model_path(source))
    template = donor.get_chat_template()
    if tokenizer.chat_template is not None and tokenizer.chat_template != template:
        logger.warning("chat_template_from %s replaces the tokenizer's own chat template", source)
    missing = [t for t in (donor.eos_token, donor.bos_token) if t is not None and t not in tokenizer.get_vocab()]
    if missing:
        logger.warning("chat_template_from %s: tokens %s of its tokenizer are not in this one; the template renders "
                       "this tokenizer's own bos/eos", source, missing)
    tokenizer.chat_template = template
