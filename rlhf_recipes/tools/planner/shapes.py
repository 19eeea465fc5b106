"""Model shapes for the planner, from a config.json alone (no weights are read or downloaded).

Where a shape comes from, in this order:
  1. a local directory holding config.json, or a path to a .json file;
  2. `tiny`, `nano`...: the embedded models' config (built locally, like every tiny or nano run);
  3. shapes shipped in rlhf_recipes/tools/planner/shapes/<org>--<name>.json: the book's models
     (Qwen/Qwen3-0.6B, Qwen/Qwen3-0.6B-Base, Qwen/Qwen3-1.7B, allenai/OLMo-2-0425-1B(-SFT)),
     their published config.json values, so the planner works offline for every recipe;
  4. the Hub: config.json only (`huggingface_hub.hf_hub_download`), cached like any download.

Only decoder-only transformers with a SwiGLU MLP and RMSNorm (Llama, Qwen2/3, OLMo-2,
Mistral, ...) are modelled; others are refused with a message, not guessed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SHIPPED = Path(__file__).parent / "shapes"

# model_type -> (q/k norm, norm placement). "post": OLMo-2 normalizes the attention and MLP
# outputs; "pre": the usual input norms. q/k norm: an RMSNorm on queries and keys.
# OLMo-2's RMSNorm multiplies by its weight in fp32 before casting back (Llama/Qwen cast first),
# which changes what it saves for backward (memory.layer_activation_bytes_per_token).
NORM_WEIGHT_FP32 = {"olmo2"}
ARCHITECTURES = {"qwen3": (True, "pre"), "olmo2": (True, "post"), "llama": (False, "pre"), "qwen2": (False, "pre"),
                 "mistral": (False, "pre")}


class ShapeError(ValueError):
    """A model whose shape cannot be found or is not a supported architecture."""


@dataclass(frozen=True)
class ModelShape:
    """What the memory model needs to know about an architecture (all from config.json)."""

    name: str
    model_type: str
    hidden: int  # h
    intermediate: int  # f (SwiGLU inner width)
    layers: int  # L
    heads: int  # a (query heads)
    kv_heads: int  # k
    head_dim: int  # d
    vocab: int  # V
    tied: bool  # input and output embeddings share one matrix
    qk_norm: bool
    norm: str  # "pre" or "post"
    attention_bias: bool = False
    config_dtype: str | None = None
    source: str = ""

    @property
    def norm_weight_fp32(self) -> bool:
        return self.model_type in NORM_WEIGHT_FP32

    # --- parameter counts (formulas; checked against real modules in tests/test_planner.py) ---

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in_features, out_features) of each nn.Linear in one decoder layer."""
        h, f, a, k, d = self.hidden, self.intermediate, self.heads, self.kv_heads, self.head_dim
        return {"q_proj": (h, a * d), "k_proj": (h, k * d), "v_proj": (h, k * d), "o_proj": (a * d, h),
                "gate_proj": (h, f), "up_proj": (h, f), "down_proj": (f, h)}

    def layer_linear_params(self) -> int:
        """Weights of one layer's linear layers: h*(a*d) + 2*h*(k*d) + (a*d)*h + 3*h*f."""
        return sum(i * o for i, o in self.linear_shapes().values())

    def layer_other_params(self) -> int:
        """Norms and biases of one layer: 2h (two RMSNorms) + q/k norm weights + attention biases.

        q/k norm: per head (Qwen3: d + d) or over all heads (OLMo-2: a*d + k*d).
        Biases (attention_bias): q, k, v (Llama/Qwen3 also o; Qwen2 only q, k, v).
        """
        a, k, d, h = self.heads, self.kv_heads, self.head_dim, self.hidden
        n = 2 * h
        if self.qk_norm:
            n += 2 * d if self.model_type == "qwen3" else (a + k) * d
        if self.attention_bias:
            n += (a + 2 * k) * d + (0 if self.model_type == "qwen2" else h)
        return n

    def embedding_params(self) -> int:
        """Input embedding V*h, plus an untied output projection V*h."""
        return self.vocab * self.hidden * (1 if self.tied else 2)

    def total_params(self, score_labels: int | None = None, score_bias: bool = False) -> int:
        """All parameters: embeddings + L * (linears + norms) + final norm h.

        A reward model (score_labels = n) has no LM head: the input embedding V*h, and a score
        head Linear(h, n) (+ n with a bias) instead.
        """
        body = self.layers * (self.layer_linear_params() + self.layer_other_params()) + self.hidden
        if score_labels is None:
            return body + self.embedding_params()
        return body + self.vocab * self.hidden + self.hidden * score_labels + (score_labels if score_bias else 0)

    def decoder_linear_params(self) -> int:
        """Parameters bitsandbytes quantizes in 4-bit: every decoder linear (not embeddings/heads)."""
        return self.layers * self.layer_linear_params()


def shape_from_config(config: dict[str, Any], name: str = "", source: str = "") -> ModelShape:
    """A ModelShape from a config.json mapping."""
    model_type = config.get("model_type")
    if model_type not in ARCHITECTURES:
        raise ShapeError(f"{name or 'model'}: model_type {model_type!r} is not modelled by the planner "
                         f"(supported: {', '.join(sorted(ARCHITECTURES))})")
    hidden_act = config.get("hidden_act", "silu")
    if hidden_act not in ("silu", "swiglu"):
        raise ShapeError(f"{name}: hidden_act {hidden_act!r}: the planner models SwiGLU MLPs only")
    heads = int(config["num_attention_heads"])
    hidden = int(config["hidden_size"])
    qk_norm, norm = ARCHITECTURES[model_type]
    return ModelShape(name=name or config.get("_name_or_path", ""), model_type=model_type, hidden=hidden,
                      intermediate=int(config["intermediate_size"]), layers=int(config["num_hidden_layers"]),
                      heads=heads, kv_heads=int(config.get("num_key_value_heads") or heads),
                      head_dim=int(config.get("head_dim") or hidden // heads), vocab=int(config["vocab_size"]),
                      tied=bool(config.get("tie_word_embeddings", False)), qk_norm=qk_norm, norm=norm,
                      attention_bias=bool(config.get("attention_bias", False)),
                      config_dtype=config.get("torch_dtype") or config.get("dtype"), source=source)


def shipped_names() -> list[str]:
    return sorted(p.stem.replace("--", "/") for p in SHIPPED.glob("*.json"))


def load_config(name: str, revision: str | None = None) -> tuple[dict[str, Any], str]:
    """(config.json mapping, where it came from) for a model id, a path, or an embedded model (tiny, nano...)."""
    from rlhf_recipes.models import EMBEDDED, TINY

    path, shipped = Path(name), SHIPPED / (name.replace("/", "--") + ".json")
    if path.is_dir() and (path / "config.json").is_file():
        file, source = path / "config.json", str(path / "config.json")
    elif path.suffix == ".json" and path.is_file():
        file, source = path, str(path)
    elif name in EMBEDDED:  # the nano models have their untrained start's shape (no SFT run needed)
        from rlhf_recipes.nano import nano_init_path
        from rlhf_recipes.tiny import tiny_model_path

        file = Path(tiny_model_path() if name == TINY else nano_init_path()) / "config.json"
        source = f"{'tiny' if name == TINY else 'nano'} profile (built locally)"
    elif shipped.is_file():
        file, source = shipped, f"shipped shape {shipped.name}"
    else:
        try:
            from huggingface_hub import hf_hub_download

            from rlhf_recipes.hub import hub_online

            # Offline or unreachable: the local cache only, at once (not a minute of download retries).
            cache_only = not hub_online()
            file = hf_hub_download(name, "config.json", revision=revision, local_files_only=cache_only)
        except Exception as e:  # offline, unknown id, gated repo
            raise ShapeError(
                f"no shape for {name!r}: not a local config, not shipped ({', '.join(shipped_names())}), and its "
                f"config.json could not be fetched from the Hub ({type(e).__name__}: {e}). Pass a local directory "
                "holding config.json as --model_name_or_path, or drop its config.json into "
                f"{SHIPPED}/<org>--<name>.json."
            ) from None
        source = f"Hub config.json ({name})"
    return json.loads(Path(file).read_text()), source


def load_shape(name: str, revision: str | None = None) -> ModelShape:
    config, source = load_config(name, revision)
    return shape_from_config(config, name=name, source=source)
