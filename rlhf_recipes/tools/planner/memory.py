"""The memory model: pure arithmetic, one function per term, each with its formula.

Every function returns bytes on ONE GPU (one process). Notation, from config.json:
  h hidden, f SwiGLU inner width, L layers, a query heads, k key/value heads, d head dim,
  V vocabulary; from the recipe: n sequences in a micro-batch, s tokens per sequence,
  T = n*s tokens; e bytes per activation element (2 in bf16, 4 in fp32); p bytes per weight;
  N processes (GPUs).

What is counted is what PyTorch allocates for tensors (torch.cuda.max_memory_allocated on a
GPU). The CUDA context, cuBLAS/NCCL workspaces and the caching allocator's fragmentation
come on top; `gpu_overhead_bytes` adds a flat allowance for them.

Activation formulas follow the tensors that autograd saves in transformers' implementation
of these layers (RMSNorm upcasts to fp32; SDPA saves q, k, v, its output and a logsumexp;
SwiGLU saves gate, SiLU output, up and their product); tests/test_planner.py checks them
against tensors measured on CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlhf_recipes.tools.planner.shapes import ModelShape

GiB = 2**30

DTYPE_BYTES = {"float32": 4, "fp32": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2}

# TRL's fused LM head scores tokens in tiles (trl.kernels.chunked_logprob.TOKEN_CHUNK_SIZE and
# trl.trainer.utils._CHUNKED_LOGPROB_CHUNK_SIZE): never the whole (T, V) logits at once.
FUSED_HEAD_TOKEN_TILE = 4096
FUSED_HEAD_VOCAB_TILE = 32768


def dtype_bytes(dtype: str | None, default: int = 2) -> int:
    return DTYPE_BYTES.get(str(dtype).replace("torch.", ""), default) if dtype not in (None, "auto") else default


# ---------------------------------------------------------------------------------------
# Weights


def nf4_bytes(params: int, nested: bool = False) -> float:
    """bitsandbytes 4-bit (nf4/fp4) storage: params/2 + one absmax per block of 64.

    absmax in fp32: 4/64 bytes per parameter (0.5625 B/param in all); with nested (double)
    quantization the absmax are 8-bit with one fp32 constant per 256 of them: 1/64 + 4/(64*256).
    """
    scale = 1 / 64 + 4 / (64 * 256) if nested else 4 / 64
    return params * (0.5 + scale)


def lora_params(shape: ModelShape, rank: int, targets: list[str] | str | None) -> int:
    """LoRA adapter parameters: r * (in + out) per targeted linear, in every layer.

    targets: 'all-linear' (every decoder linear; PEFT never adapts the output layer), or a list of
    module names (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj).
    """
    linears = shape.linear_shapes()
    if targets in (None, "all-linear") or targets == ["all-linear"]:
        chosen = list(linears)
    else:
        names = [targets] if isinstance(targets, str) else list(targets)
        chosen = [n for n in linears if n in names]
    return shape.layers * sum(rank * (linears[n][0] + linears[n][1]) for n in chosen)


# ---------------------------------------------------------------------------------------
# Gradients and optimizer state


def gradient_bytes(trainable: int, grad_bytes: int) -> float:
    """trainable * (bytes of the parameter dtype): .grad has the parameter's dtype."""
    return trainable * grad_bytes


def optimizer_state_bytes(trainable: int, state_bytes: int, optim: str) -> float:
    """Optimizer state per trainable parameter.

    AdamW (torch, any variant): 2 states (exp_avg, exp_avg_sq) in the parameter's dtype -> 2 * p;
    8-bit Adam (bitsandbytes): 2 * 1 byte (+ block constants, ignored); Adafactor: factored second
    moment, about 0; SGD: 0 (no momentum by default).
    """
    name = optim.lower()
    if "8bit" in name or "8_bit" in name:
        return trainable * 2.0
    if "adafactor" in name:
        return 0.0
    if name.startswith("sgd"):
        return 0.0
    return trainable * 2.0 * state_bytes


def deepspeed_optimizer_bytes(trainable: int, world: int, offload: bool) -> float:
    """DeepSpeed ZeRO (stages 1-3) keeps an fp32 master copy and fp32 Adam states of its shard:
    (4 + 4 + 4) * trainable / N; 0 on the GPU with offload_optimizer_device: cpu."""
    return 0.0 if offload else 12.0 * trainable / world


def ddp_bucket_bytes(trainable: int, grad_bytes: int) -> float:
    """DistributedDataParallel's all-reduce buckets: a second copy of every gradient
    (trainable * p), since Trainer does not set gradient_as_bucket_view."""
    return trainable * grad_bytes


def zero3_working_set_bytes(shape: ModelShape, bytes_per_param: int) -> float:
    """Parameters ZeRO-3 gathers at once: the larger of the embedding matrix (V*h, gathered whole
    when used) and two layers (the one running + the prefetched one), times p; plus the
    reduce bucket (auto: h^2 elements in p, and its fp32 copy)."""
    layer = shape.layer_linear_params() + shape.layer_other_params()
    gathered = max(shape.vocab * shape.hidden, 2 * layer) * bytes_per_param
    return gathered + shape.hidden**2 * (bytes_per_param + 4)


# ---------------------------------------------------------------------------------------
# Activations (training: forward saved for backward)


def layer_activation_bytes_per_token(shape: ModelShape, e: int, attention: str = "sdpa", padded: bool = True,
                                     seq_len: int = 0) -> float:
    """Bytes one decoder layer saves for backward, per token, without checkpointing.

    An RMSNorm saves its input upcast to fp32 (4 per element) and the normalized values (n: e, or
    4 for OLMo-2, which multiplies by its weight before casting back); a linear saves its input.
      norms      2 (4 + n + e) h  two RMSNorms + the input of the linear after each (OLMo-2's
                                  post-norms: same count, the linears read the residual stream)
      queries    (4 + n + e) a d  with a q/k norm (fp32 copy, normalized, rotated); e a d without
      keys       (4 + n) k d      q/k norm (only with one), + the rotated keys as attention saves them:
                                  e a d when SDPA gets a padding mask and k < a (transformers repeats
                                  the key/value heads), e k d otherwise
      values     e a d or e k d   (same rule)
      attention  e a d + 4 a      output (it is already laid out as o_proj's input) and fp32
                                  logsumexp; with a padding mask, SDPA converts the boolean mask to an
                                  additive one in e and saves it in every layer: + e s (n s^2 e per layer);
                                  eager attention instead keeps the (fp32 and e) probabilities: (4 + e) a s
      MLP        4 e f            gate, SiLU(gate), up, and their product (down_proj input)
    """
    h, f, a, k, d = shape.hidden, shape.intermediate, shape.heads, shape.kv_heads, shape.head_dim
    n = 4 if shape.norm_weight_fp32 else e
    repeat = attention == "sdpa" and padded and k < a
    kv = a * d if repeat else k * d
    norms = 2 * (4 + n + e) * h
    queries = ((4 + n + e) if shape.qk_norm else e) * a * d
    keys = (4 + n) * k * d * shape.qk_norm + e * kv
    values = e * kv
    if attention == "eager":
        attn = e * a * d + (4 + e) * a * seq_len
    else:
        attn = e * a * d + 4 * a + (e * seq_len if attention == "sdpa" and padded else 0)
    mlp = 4 * e * f
    return norms + queries + keys + values + attn + mlp


def backward_layer_workspace_per_token(shape: ModelShape, e: int) -> float:
    """Gradients alive while one layer is differentiated, per token: two MLP-wide gradients, and
    in bf16 the fp32 gradients through the RMSNorm upcasts: 2 f e + 4 h (4 - e). (Measured on CPU
    for Qwen3 and OLMo-2 layers; see tests/test_planner.py.)"""
    return 2 * shape.intermediate * e + 4 * shape.hidden * (4 - e)


def activation_bytes(shape: ModelShape, tokens: int, e: int, checkpointing: bool, attention: str = "sdpa",
                     padded: bool = True, seq_len: int = 0) -> dict[str, float]:
    """Activation memory of one micro-batch of T tokens at its peak.

    Without checkpointing: T * L * layer (all layers' saved tensors) + T * backward workspace.
    With checkpointing (transformers checkpoints each decoder layer): T * L * e h (each layer's
    input) + T * layer (one layer recomputed in backward) + T * backward workspace.
    Outside the layers: the final RMSNorm (4 + n) h per token (its output is copied by the head).
    """
    per_layer = layer_activation_bytes_per_token(shape, e, attention, padded, seq_len)
    work = backward_layer_workspace_per_token(shape, e)
    outside = (4 + (4 if shape.norm_weight_fp32 else e)) * shape.hidden
    checkpoints = tokens * shape.layers * e * shape.hidden if checkpointing else 0.0
    saved = checkpoints + tokens * per_layer if checkpointing else tokens * shape.layers * per_layer
    return {"layers": saved, "checkpoints": checkpoints, "backward_workspace": tokens * work,
            "final_norm": tokens * outside}


def attention_mask_bytes(sequences: int, seq_len: int, padded: bool, attention: str) -> float:
    """SDPA/eager with padding get a (n, 1, s, s) boolean mask: n s^2 bytes (shared by all layers).
    flash-attention unpads instead and needs none."""
    return sequences * seq_len**2 if padded and attention in ("sdpa", "eager") else 0.0


def rope_bytes(shape: ModelShape, sequences: int, seq_len: int, e: int) -> float:
    """cos and sin of the rotary embedding, computed once per forward: 2 n s d e."""
    return 2 * sequences * seq_len * shape.head_dim * e


# ---------------------------------------------------------------------------------------
# The LM head and loss


def fused_head_bytes(shape: ModelShape, scored_tokens: int, e: int, head_trainable: bool, p: int,
                     triton: bool = True) -> dict[str, float]:
    """TRL's fused LM head (DPO, GRPO): per-token log-probs computed in tiles, never the full logits.

    forward   a tile buffer min(T, 4096) x 32768 in e (allocated at the full vocabulary-chunk width,
              even for a smaller vocabulary), the scored hidden states (T h e, a copy)
    backward  the same tile, the hidden-state gradient in fp32 (4 T h), and, when the head trains
              (full fine-tune), its weight gradient in fp32 (4 V h) plus its cast to p (V h p)
    without Triton (CPU) the tile is folded by torch ops: ~7 fp32 temporaries and a mask of the
              tile's used width, 29 B x min(T, 4096) x min(V, 32768) (none on a GPU: one kernel)
    """
    rows = min(scored_tokens, FUSED_HEAD_TOKEN_TILE)
    tile = rows * FUSED_HEAD_VOCAB_TILE * e
    if not triton:
        tile += 29 * rows * min(shape.vocab, FUSED_HEAD_VOCAB_TILE)
    hidden = scored_tokens * shape.hidden * e
    forward = tile + hidden
    backward = tile + hidden + 4 * scored_tokens * shape.hidden
    if head_trainable:
        backward += shape.vocab * shape.hidden * (4 + p)
    return {"forward": forward, "backward": backward}


def full_logits_bytes(shape: ModelShape, tokens: int, e: int, triton: bool = True) -> dict[str, float]:
    """A trainer that materializes the logits (e.g. TRL's CPOTrainer): (T, V) logits in e, kept for backward,
    and their gradient (T V e) at the start of backward. Without Triton (CPU), selective_log_softmax
    also keeps the stacked per-row log-softmax and builds the gradient with a scatter: 4 T V e."""
    logits = tokens * shape.vocab * e
    return {"forward": logits * (1 if triton else 2), "backward": logits * (2 if triton else 4)}


# ---------------------------------------------------------------------------------------
# Generation (policy-gradient rollouts)


def kv_cache_bytes(shape: ModelShape, sequences: int, total_len: int, e: int) -> float:
    """KV cache at the end of generation: 2 (K and V) * L * k * d * e per token, for every
    sequence generated at once, over prompt + completion. transformers' DynamicCache grows by
    concatenation, so one layer's K or V is briefly held twice (added)."""
    per_token = 2 * shape.layers * shape.kv_heads * shape.head_dim * e
    growth = 2 * shape.kv_heads * shape.head_dim * e * sequences * total_len
    return per_token * sequences * total_len + growth


def sampling_bytes(shape: ModelShape, sequences: int) -> float:
    """Next-token logits of the last position, in fp32, and about three working copies for
    temperature / top-k / top-p / softmax: 4 * 4 n V."""
    return 16 * sequences * shape.vocab


def prefill_bytes(shape: ModelShape, sequences: int, prompt_len: int, e: int, attention: str) -> float:
    """No-grad forward over the prompts, one layer at a time: the widest intermediates (gate, up,
    product: 3 f e) and the residual stream (2 h e) per token, the (n, 1, s, s) boolean mask, and
    the layer's additive copy of it in e (SDPA)."""
    tokens = sequences * prompt_len
    mask = attention_mask_bytes(sequences, prompt_len, True, attention)
    float_mask = sequences * prompt_len**2 * e if attention == "sdpa" else 0
    return tokens * (3 * shape.intermediate + 2 * shape.hidden) * e + mask + float_mask


def generation_transient_bytes(shape: ModelShape, sequences: int, prompt_len: int, completion_len: int, e: int,
                               attention: str) -> float:
    """What generation holds on top of the final KV cache at its peak. The peak is the larger of
    the prefill (KV cache of the prompts + prefill working set) and the last decoding step (full
    KV cache + sampling); so: max(sampling, kv(prompt) + prefill - kv(prompt + completion))."""
    kv_total = kv_cache_bytes(shape, sequences, prompt_len + completion_len, e)
    kv_prompt = kv_cache_bytes(shape, sequences, prompt_len, e)
    return max(sampling_bytes(shape, sequences),
               kv_prompt + prefill_bytes(shape, sequences, prompt_len, e, attention) - kv_total)


# ---------------------------------------------------------------------------------------
# Beyond tensors


def gpu_overhead_bytes(world: int) -> float:
    """CUDA context + cuBLAS workspace (~0.6 GiB) and NCCL buffers (~0.3 GiB with several processes).
    Not seen by torch.cuda.max_memory_allocated; an allowance, to be measured on a GPU."""
    return 0.6 * GiB + (0.3 * GiB if world > 1 else 0.0)


FRAGMENTATION = 0.10  # the caching allocator reserves ~5-15% above the allocated peak


@dataclass(frozen=True)
class Term:
    """One line of a plan: what it is, its bytes on one GPU, the formula that gave them."""

    name: str
    bytes: float
    phase: str  # "resident" | "train" | "generation"
    formula: str
