"""A recipe + a launch -> the predicted peak memory per GPU, term by term, and a verdict.

`plan_recipe(argv, launch)` reads the recipe exactly as recipes/run.py does (load_recipe:
effective batch, LoRA, checkpointing, dtype, lengths, generation settings), the model's shape
from its config.json, and adds up the terms of rlhf_recipes/tools/planner/memory.py for the
algorithm's family, from the planner's own facts of each family (family_shapes.py):

  direct alignment  policy + reference (none for a reference-free loss such as simpo/orpo, none with
                    LoRA: the adapter is disabled instead) + chosen and rejected in one forward (2 x micro-batch)
  policy gradients  policy + reference only when beta != 0 (none with LoRA) + learned reward
                    models (rm:<dir>) + the generation phase: KV cache of a whole rollout batch
  reward models     a classification head instead of the LM head (no vocabulary-wide logits)
  SFT               policy + one sequence per example through the LM head

Two phases are planned separately, and the peak is the larger: `train` (forward + backward
of one micro-batch: gradients, activations, LM-head transients) and, for policy gradients,
`generation` (KV cache and sampling; gradients are freed then).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlhf_recipes.tools.planner import family_shapes as shapes_of
from rlhf_recipes.tools.planner import memory as M
from rlhf_recipes.tools.planner.launch import Launch
from rlhf_recipes.tools.planner.shapes import ModelShape, ShapeError, load_shape

GiB = M.GiB
A6000_GIB = 48.0  # an RTX A6000: 48 GB (49140 MiB) of GDDR6

DEFAULT_PROMPT_LENGTH = 256  # policy-gradient prompts (system prompt + question), when the recipe does not bound them


@dataclass
class Workload:
    """Token counts one GPU processes: derived from the recipe, or given (tests, measurements)."""

    train_sequences: int  # sequences in one forward/backward (micro-batch; x2 for chosen+rejected)
    train_seq_len: int  # tokens per sequence (padded to the longest in the micro-batch: worst case)
    padded: bool = True  # batches carry a padding mask
    generation_sequences: int = 0  # sequences generated at once on this GPU (policy gradients)
    prompt_len: int = 0
    completion_len: int = 0

    @property
    def train_tokens(self) -> int:
        return self.train_sequences * self.train_seq_len


@dataclass
class Plan:
    recipe: Any
    launch: Launch
    shape: ModelShape
    workload: Workload
    terms: list[M.Term]
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    capacity_gib: float = A6000_GIB

    def phase_bytes(self, phase: str) -> float:
        resident = sum(t.bytes for t in self.terms if t.phase == "resident")
        return resident + sum(t.bytes for t in self.terms if t.phase == phase)

    @property
    def phases(self) -> dict[str, float]:
        names = ["train"] + (["generation"] if any(t.phase == "generation" for t in self.terms) else [])
        return {p: self.phase_bytes(p) for p in names}

    @property
    def peak_bytes(self) -> float:
        """Predicted peak of allocated tensor memory (torch.cuda.max_memory_allocated)."""
        return max(self.phases.values())

    @property
    def peak_phase(self) -> str:
        return max(self.phases, key=self.phases.get)

    @property
    def required_bytes(self) -> float:
        """What the GPU must hold: the allocated peak + allocator fragmentation + CUDA context/NCCL."""
        return self.peak_bytes * (1 + M.FRAGMENTATION) + M.gpu_overhead_bytes(self.launch.processes)

    @property
    def verdict(self) -> str:
        need = self.required_bytes / GiB
        if need <= 0.9 * self.capacity_gib:
            return "fits"
        if need <= self.capacity_gib:
            return "tight"
        return "does not fit"

    def summary(self) -> dict[str, Any]:
        return {"recipe": self.recipe.source, "algorithm": self.recipe.algorithm.name, "model": self.shape.name,
                "shape_source": self.shape.source, "launch": self.launch.describe(), "workload": vars(self.workload),
                "terms": [{"name": t.name, "gib": round(t.bytes / GiB, 3), "phase": t.phase, "formula": t.formula}
                          for t in self.terms],
                "phases_gib": {k: round(v / GiB, 3) for k, v in self.phases.items()},
                "peak_allocated_gib": round(self.peak_bytes / GiB, 3),
                "required_gib": round(self.required_bytes / GiB, 3), "capacity_gib": self.capacity_gib,
                "verdict": self.verdict, "notes": self.notes, "warnings": self.warnings}


# ---------------------------------------------------------------------------------------


def load_for_planning(argv: list[str], world_size: int):
    """load_recipe as run.py does, on any machine: without a GPU, bf16 is turned off to construct the
    config (CPU-only machines cannot construct a bf16 TrainingArguments) and remembered separately.
    Returns (recipe, bf16)."""
    import torch

    from rlhf_recipes.config import load_recipe

    recipe = load_recipe(argv, world_size=world_size, construct=False)  # parsed once; TRL's configs built below
    if not torch.cuda.is_available() and recipe.setting("bf16"):
        return load_recipe([*argv, "--bf16", "false"], world_size=world_size), True
    recipe.model, recipe.training  # noqa: B018  (what construct=True does: TRL's own checks raise here)
    return recipe, bool(getattr(recipe.training, "bf16", False))


def default_workload(recipe, launch: Launch, prompt_len: int | None = None) -> Workload:
    training = recipe.training
    per_device = training.per_device_train_batch_size
    if shapes_of.generates_rollouts(recipe):
        prompt = prompt_len or getattr(training, "max_prompt_length", None) or DEFAULT_PROMPT_LENGTH
        completion = training.max_completion_length
        generation = (getattr(training, "generation_batch_size", None)
                      or per_device * training.gradient_accumulation_steps * launch.processes)
        return Workload(train_sequences=per_device, train_seq_len=prompt + completion,
                        generation_sequences=max(1, generation // launch.processes), prompt_len=prompt,
                        completion_len=completion)
    return Workload(train_sequences=per_device * shapes_of.sequences_per_example(recipe),
                    train_seq_len=training.max_length)


def plan_recipe(argv: list[str], launch: Launch, capacity_gib: float = A6000_GIB, prompt_len: int | None = None,
                shape: ModelShape | None = None) -> Plan:
    recipe, bf16 = load_for_planning(argv, launch.processes)
    shape = shape or load_shape(recipe.model.model_name_or_path, recipe.model.model_revision)
    return build_plan(recipe, launch, shape, default_workload(recipe, launch, prompt_len), bf16=bf16,
                      capacity_gib=capacity_gib)


def build_plan(recipe, launch: Launch, shape: ModelShape, workload: Workload, bf16: bool | None = None,
               capacity_gib: float = A6000_GIB, device: str = "cuda") -> Plan:
    """The terms of one recipe on one launch. Pure arithmetic from here on.

    device 'cpu' plans what the same run allocates on a CPU (validation of the model against
    tensors measured there): TRL's LM head then folds its tiles with torch ops instead of Triton.
    """
    training, model_args, algorithm = recipe.training, recipe.model, recipe.algorithm
    generates = shapes_of.generates_rollouts(recipe)
    world = launch.processes
    notes: list[str] = []
    warnings: list[str] = []
    terms: list[M.Term] = []

    def add(term_name: str, nbytes: float, phase: str, formula: str) -> None:
        if nbytes > 0:
            terms.append(M.Term(term_name, float(nbytes), phase, formula))

    # Precision: weights in the recipe's dtype; activations in bf16 under bf16 autocast or bf16 weights.
    p = M.dtype_bytes(model_args.dtype, default=M.dtype_bytes(shape.config_dtype, 4))
    bf16 = bool(getattr(training, "bf16", False)) if bf16 is None else bf16
    e = 2 if (bf16 or p == 2 or launch.mixed_precision == "bf16") else 4
    attention = model_args.attn_implementation or "sdpa"
    if attention not in ("sdpa", "eager", "flash_attention_2", "flash_attention_3", "kernels-community/flash-attn"):
        notes.append(f"attention {attention!r} modelled as sdpa")
        attention = "sdpa"
    if "flash" in attention:
        attention = "flash"

    # What trains.
    score_head = shapes_of.scoring_head(recipe)  # a reward model's classification head, or None: the LM head
    labels, bias = score_head or (None, False)
    total = shape.total_params(labels, bias)
    peft = bool(model_args.use_peft)
    qlora = bool(model_args.load_in_4bit)
    trl_trainer = shapes_of.trains_with_trl_trainer(recipe)
    if qlora and not peft:
        warnings.append("load_in_4bit without use_peft: 4-bit weights cannot be trained; add --use_peft true")
    if peft:
        targets = model_args.lora_target_modules
        lora = M.lora_params(shape, model_args.lora_r, targets)
        # A reward model's score head trains in full (modules_to_save).
        head = shape.hidden * labels + (labels if bias else 0) if score_head else 0
        trainable = lora + head
        # PEFT keeps adapters in fp32; TRL's trainers cast them to bf16 under QLoRA, and keep the base dtype
        # under ZeRO-3.
        adapter_bytes = grad_bytes = 2 if trl_trainer and (qlora or launch.zero3) else 4
        target_text = "all linear layers" if targets in (None, "all-linear", ["all-linear"]) else ",".join(
            [targets] if isinstance(targets, str) else targets)
        notes.append(f"LoRA r={model_args.lora_r} on {target_text}: {lora / 1e6:.1f}M adapter parameters")
    else:
        trainable, adapter_bytes, grad_bytes = total, 0, p

    # --- resident: weights, optimizer state, reference and reward models ----------------
    shard = world if launch.zero3 else 1
    if qlora:
        linear = shape.decoder_linear_params()
        nested = bool(model_args.use_bnb_nested_quant)
        base = M.nf4_bytes(linear, nested) + (total - linear) * p
        add("policy weights (4-bit base)", base / shard, "resident",
            f"nf4 decoder linears {linear / 1e6:.0f}M x {M.nf4_bytes(1, nested):.4f} B"
            f" + other {(total - linear) / 1e6:.0f}M x {p} B" + (f" / {shard} (ZeRO-3)" if shard > 1 else ""))
        if launch.distributed == "DEEPSPEED":
            warnings.append("QLoRA under DeepSpeed is untested on GPUs and sharded 4-bit weights are not modelled "
                            "(counted as above / N); prefer 1gpu.yaml or 4gpu.yaml")
    else:
        add("policy weights", total * p / shard, "resident",
            f"{total / 1e9:.3f}B params x {p} B" + (f" / {shard} (ZeRO-3)" if shard > 1 else ""))
    if peft:
        add("LoRA adapters", trainable * adapter_bytes / shard, "resident",
            f"{trainable / 1e6:.2f}M x {adapter_bytes} B")

    optim = str(getattr(training.optim, "value", training.optim))
    if launch.distributed == "DEEPSPEED":
        add("optimizer (fp32 master + Adam, sharded)",
            M.deepspeed_optimizer_bytes(trainable, world, launch.offload_optimizer), "resident",
            f"12 B x {trainable / 1e6:.1f}M trainable / {world}"
            + (" (offloaded: 0 on GPU)" if launch.offload_optimizer else ""))
    else:
        add(f"optimizer state ({optim})", M.optimizer_state_bytes(trainable, grad_bytes, optim), "resident",
            f"2 states x {trainable / 1e6:.1f}M x {grad_bytes} B" if "8bit" not in optim
            else f"2 x 1 B x {trainable / 1e6:.1f}M")

    if shapes_of.reference_model(recipe, peft):
        ref_p = M.dtype_bytes(getattr(training, "ref_dtype", None), p)
        add("reference model", total * ref_p / shard, "resident",
            f"frozen copy: {total / 1e9:.3f}B x {ref_p} B" + (f" / {shard}" if shard > 1 else ""))
    reference_note = shapes_of.reference_note(recipe, peft)
    if reference_note:
        notes.append(reference_note)

    for path in shapes_of.learned_reward_models(recipe):
        try:
            rm_shape = load_shape(path)
        except (ShapeError, OSError) as err:
            notes.append(f"learned reward {path}: shape unknown ({err}); not counted")
            continue
        # rewards/reward_model.py loads it in bf16 on a GPU unless reward_model_dtype says
        rm_p, rm_params = M.dtype_bytes(getattr(training, "reward_model_dtype", None), 2), rm_shape.total_params(1)
        add(f"reward model {path}", rm_params * rm_p, "resident", f"{rm_params / 1e9:.3f}B x {rm_p} B (inference only)")
    checkpointing = bool(training.activation_checkpointing)
    if hasattr(training, "share_value_backbone"):  # PPO (custom_losses/ppo/trainer.py): the value model
        value_terms, value_notes = value_model_terms(
            recipe, shape, workload, p=p, e=e, launch=launch, policy_peft=peft, checkpointing=checkpointing,
            attention=attention, optim=optim)
        terms.extend(value_terms)
        notes.extend(value_notes)

    if launch.ddp:
        add("DDP gradient buckets", M.ddp_bucket_bytes(trainable, grad_bytes), "resident",
            f"{trainable / 1e6:.1f}M x {grad_bytes} B (a second copy of the gradients)")
    if launch.zero3:
        add("ZeRO-3 gathered parameters + buckets", M.zero3_working_set_bytes(shape, p), "train",
            "max(V h, 2 layers) x p + h^2 x (p + 4)")

    # --- train phase: gradients, activations, head -------------------------------------
    n, s, T = workload.train_sequences, workload.train_seq_len, workload.train_tokens
    act = M.activation_bytes(shape, T, e, checkpointing, attention, workload.padded, s)
    if launch.distributed == "DEEPSPEED":
        grads = trainable * (grad_bytes + 4) / (world if launch.zero_stage >= 2 else 1)
        add("gradients (sharded + fp32 copy)", grads, "train",
            f"{trainable / 1e6:.1f}M x ({grad_bytes} + 4) B / {world}")
    elif training.gradient_accumulation_steps == 1 and not hasattr(training, "share_value_backbone"):
        # One micro-batch per optimizer step: no gradient outlives a backward, and each layer's gradients
        # appear as its saved activations are freed, so the two overlap: max(activations, gradients).
        # (With accumulation the earlier micro-batches' gradients stay through the whole next backward.)
        freed = act["checkpoints"] if checkpointing else act["layers"]
        grads = M.gradient_bytes(trainable, grad_bytes)
        add("gradients beyond the activations they replace", max(0.0, grads - freed), "train",
            f"max(0, {trainable / 1e6:.1f}M x {grad_bytes} B - saved layer activations): one micro-batch per step")
    else:
        add("gradients", M.gradient_bytes(trainable, grad_bytes), "train", f"{trainable / 1e6:.1f}M x {grad_bytes} B")

    per_layer = M.layer_activation_bytes_per_token(shape, e, attention, workload.padded, s)
    what = f"{n} seq x {s} tok = {T} tokens"
    if checkpointing:
        add("activations (checkpointed)", act["layers"], "train",
            f"{what}: L x e h per token ({shape.layers * e * shape.hidden / 1024:.0f} KiB) + one layer "
            f"({per_layer / 1024:.0f} KiB)")
    else:
        add("activations", act["layers"], "train",
            f"{what} x L x {per_layer / 1024:.0f} KiB per token per layer")
    add("final norm + attention mask + rope",
        act["final_norm"] + M.attention_mask_bytes(n, s, workload.padded, attention) + M.rope_bytes(shape, n, s, e),
        "train", "(4 + e) h T + n s^2 + 2 n s d e")
    if score_head:
        head = {"forward": 0.0, "backward": 0.0}
        head_name = None
    elif algorithm.materializes_full_logits:
        # A trainer on its own rollouts keeps logits for the completion only (TRL's logits_to_keep).
        logit_tokens = n * workload.completion_len if generates and workload.completion_len else T
        head = M.full_logits_bytes(shape, logit_tokens, e, triton=device != "cpu")
        head_name = "logits (T x V, materialized by the trainer)"
    else:
        head = M.fused_head_bytes(shape, T, e, head_trainable=not peft, p=p, triton=device != "cpu")
        head_name = "LM head (TRL fused log-prob tiles" + (", fp32 weight grad)" if not peft else ")")
    transient = max(head["forward"], head["backward"], act["backward_workspace"])
    if head_name and transient == max(head["forward"], head["backward"]):
        add(head_name, transient, "train", "max(forward, backward) tile + hidden copies"
            + (" + 4 V h + V h p" if not peft else ""))
    else:
        add("backward workspace", transient, "train", "(2 f e + 4 h (4 - e)) T: gradients of one layer")

    # --- generation phase (policy gradients) --------------------------------------------
    if generates:
        g, total_len = workload.generation_sequences, workload.prompt_len + workload.completion_len
        add("KV cache", M.kv_cache_bytes(shape, g, total_len, e), "generation",
            f"{g} seq x {total_len} tok x 2 L k d e "
            f"({2 * shape.layers * shape.kv_heads * shape.head_dim * e / 1024:.0f} KiB/token)")
        add("sampling / prefill", M.generation_transient_bytes(shape, g, workload.prompt_len, workload.completion_len,
                                                               e, attention),
            "generation", "max(sampling 16 n V, prefill of one layer + prompt KV - final KV)")
        if launch.zero3 and getattr(training, "ds3_gather_for_generation", True):
            add("ZeRO-3 weights gathered for generation", total * p * (1 - 1 / world), "generation",
                "the full model on every GPU while generating (ds3_gather_for_generation)")
        backend = getattr(training, "rollout_backend", "hf")
        if getattr(training, "use_vllm", False):
            notes.append(f"rollout_backend {backend}: generation memory of the vLLM engine is not modelled "
                         "(colocate: vllm_gpu_memory_utilization of the GPU)")
        elif getattr(training, "use_transformers_continuous_batching", False):
            notes.append("rollout_backend continuous_batching: its paged KV cache is sized by "
                         "transformers_continuous_batching_config (TRL's default: max_memory_percent 0.5 of the free "
                         "memory), not by the rollout batch modelled here")
        notes.append(f"prompt length assumed {workload.prompt_len} tokens (--prompt-length to change); completions "
                     f"at the {workload.completion_len}-token budget (random or early models run to it)")
    else:
        notes.append(f"every sequence padded to max_length {s} (the worst case; real batches pad to their longest)")

    if not checkpointing:
        notes.append("activation checkpointing off")
    if launch.offload_params:
        notes.append("offload_param_device: parameters leave the GPU between uses (not modelled: counted on GPU)")
    return Plan(recipe=recipe, launch=launch, shape=shape, workload=workload, terms=terms, notes=notes,
                warnings=warnings, capacity_gib=capacity_gib)


def value_model_terms(recipe, shape: ModelShape, workload: Workload, p: int, e: int, launch: Launch,
                      policy_peft: bool, checkpointing: bool, attention: str,
                      optim: str) -> tuple[list[M.Term], list[str]]:
    """PPO's value model (custom_losses/ppo/trainer.py, custom_losses/ppo/value_model.py).

    separate (the book): a full copy of the policy's backbone with Linear(h, 1) instead of the LM
      head, loaded in the policy's dtype (never quantized), with its own Adam state (in the policy's
      optimizer by default, value_optimizer: joint; the same bytes either way), LoRA exactly when the policy has it (value_use_peft), checkpointed like the policy.
      Not a DeepSpeed engine: a full replica on every GPU even under ZeRO-3 (DDP-wrapped otherwise).
      Its forward/backward runs in the same backward as the policy's: activations add up.
    shared: only Linear(h, 1) in fp32 on the policy's hidden states (weights, grad, Adam: 16 h bytes).
    """
    training, model_args = recipe.training, recipe.model
    if training.share_value_backbone:
        head = M.Term("value head (shared backbone)", 16.0 * shape.hidden, "resident",
                      "Linear(h, 1) fp32 + grad + 2 Adam states")
        return [head], ["PPO value model: a head on the policy's backbone (share_value_backbone)"]
    notes = []
    v_shape = shape
    if training.value_model_path:
        try:
            v_shape = load_shape(training.value_model_path)
        except (ShapeError, OSError):
            notes.append(f"value_model_path {training.value_model_path}: shape unknown, assumed the policy's")
    params = v_shape.total_params(1)
    value_peft = policy_peft if training.value_use_peft is None else training.value_use_peft
    if value_peft:
        trainable = M.lora_params(v_shape, model_args.lora_r, model_args.lora_target_modules) + v_shape.hidden
        gb = 4  # PEFT keeps the value model's adapters (and its head) in fp32
    else:
        trainable, gb = params, p
    T = workload.train_tokens
    act = M.activation_bytes(v_shape, T, e, checkpointing, attention, workload.padded, workload.train_seq_len)
    terms = [
        M.Term("value model weights", params * p + (trainable * gb if value_peft else 0), "resident",
               f"{params / 1e9:.3f}B x {p} B (policy backbone + Linear(h, 1); a full replica per GPU)"),
        M.Term("value model optimizer", M.optimizer_state_bytes(trainable, gb, optim), "resident",
               f"2 states x {trainable / 1e6:.1f}M x {gb} B"),
        M.Term("value model gradients", M.gradient_bytes(trainable, gb), "train", f"{trainable / 1e6:.1f}M x {gb} B"),
        M.Term("value model activations", act["layers"] + act["final_norm"], "train",
               "as the policy's (same micro-batch, same checkpointing), no LM head"),
    ]
    if launch.ddp:
        terms.append(M.Term("value model DDP buckets", M.ddp_bucket_bytes(trainable, gb), "resident",
                            f"{trainable / 1e6:.1f}M x {gb} B"))
    if launch.zero3:
        notes.append("PPO value model: not partitioned by ZeRO-3 (a full replica per GPU); "
                     "share_value_backbone: true keeps only a head")
    notes.append(f"PPO value model: a separate {'LoRA-adapted ' if value_peft else ''}copy of the backbone "
                 "(share_value_backbone: false, the book)")
    return terms, notes
