"""Loading the model to evaluate: a run folder, a checkpoint, a hub id or `tiny`; optionally quantized.

`--quantize int8|int4` loads the weights through bitsandbytes (transformers' BitsAndBytesConfig). With
bitsandbytes 0.50 both run on CPU too (its CPU backend: int8 casts activations to float16 inside the matmul,
int4 is NF4 with float32 compute on CPU, bfloat16 on a GPU), so the same command measures the change.
"""

from __future__ import annotations

import logging
from pathlib import Path

from rlhf_recipes.evaluation.options import QUANTIZE, EvalError, EvalOptions

logger = logging.getLogger(__name__)


def device_of(options: EvalOptions) -> str:
    import torch

    return options.device or ("cuda" if torch.cuda.is_available() else "cpu")


def quantization_config(quantize: str | None):
    """transformers' BitsAndBytesConfig for int8 / int4 (NF4), or None."""
    if quantize is None:
        return None
    if quantize not in QUANTIZE:
        raise EvalError(f"--quantize: expected one of {', '.join(QUANTIZE)}, got {quantize!r}")
    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        raise EvalError("--quantize needs bitsandbytes: pip install 'rlhf-recipes[qlora]'") from None
    import torch
    from transformers import BitsAndBytesConfig

    if quantize == "int8":
        # Said on every forward of every layer on CPU (activations cast to float16): once in the docs is enough.
        logging.getLogger("bitsandbytes.autograd._functions").setLevel(logging.ERROR)
        return BitsAndBytesConfig(load_in_8bit=True)
    compute = torch.bfloat16 if torch.cuda.is_available() else torch.float32
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=compute)


def load_kwargs(recipe, options: EvalOptions) -> dict:
    import torch

    dtype = options.dtype or recipe.model.dtype
    kwargs: dict = {"dtype": getattr(torch, dtype) if dtype not in (None, "auto") else dtype}
    quantization = quantization_config(options.quantize)
    if quantization is not None:
        kwargs["quantization_config"] = quantization
        kwargs["device_map"] = {"": device_of(options)}
    return kwargs


def load_causal_lm(path: str, recipe, options: EvalOptions):
    """(causal LM in eval mode on the evaluation device, its tokenizer: the one saved with the model, else the
    recipe's, as a checkpoint may hold none)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlhf_recipes.models import resolve_model_path

    path = resolve_model_path(path)
    kwargs = load_kwargs(recipe, options)
    model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    if "quantization_config" not in kwargs:
        model.to(device_of(options))
    source = path if any((Path(path) / f).exists() for f in ("tokenizer.json", "tokenizer_config.json")) else \
        resolve_model_path(recipe.model.model_name_or_path)
    tokenizer = AutoTokenizer.from_pretrained(source)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model.eval(), tokenizer
