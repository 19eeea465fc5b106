"""Scale and memory: LoRA / QLoRA in every family, the reference as the adapter-disabled base,
checkpointing with PEFT, ZeRO-3 with two real processes, and 1 vs 2 processes giving the same run.

Families are taken from the registry, so a family added later (PPO) is covered by the same tests
once it exists. CPU notes: 4-bit runs use bf16 compute (as every real recipe does); and
bitsandbytes' CPU inference path (repacked weights, used once a 4-bit layer has run in eval mode)
has no backward, so the tests keep it off (`_bnb_cpu_training`).
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from conftest import launch, read_metrics, run_recipe
from rlhf_recipes.profiles import read_profile
from rlhf_recipes.registry import ALGORITHMS

# One algorithm per family (the first alphabetically for a family not listed), plus the token-level
# reward models, whose trainer is ours rather than TRL's.
PREFERRED = {"direct_alignment": "dpo", "policy_gradient": "grpo", "reward_model": "preference_rm"}
FAMILIES = sorted({a.family for a in ALGORITHMS.values()})
REPRESENTATIVES = sorted(
    {PREFERRED.get(f) or min(n for n, a in ALGORITHMS.items() if a.family == f) for f in FAMILIES}
    | ({"orm"} & set(ALGORITHMS))
    | ({"ppo"} & set(ALGORITHMS))
)
# A policy-gradient rollout batch small enough for CPU: 1 prompt x 8 rollouts, one optimizer step.
SMALL_ROLLOUT = ["--generation_batch_size", "8", "--max_steps", "1"]
ALL_LINEAR = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}


def _small(algorithm: str) -> list[str]:
    return SMALL_ROLLOUT if ALGORITHMS[algorithm].family == "policy_gradient" else []


def _tiny_steps(algorithm: str) -> int | None:
    """Optimizer steps of the algorithm's tiny run: SMALL_ROLLOUT's one, the family's tiny max_steps, or None
    where the tiny run is sized in epochs (rejection sampling's SFT on its selection)."""
    if _small(algorithm):
        return 1
    return read_profile("tiny").families[ALGORITHMS[algorithm].family].get("max_steps")


@pytest.fixture
def _bnb_cpu_training(monkeypatch):
    """bitsandbytes repacks 4-bit weights for its CPU inference kernel the first time a layer runs in
    eval mode (generation, evaluation); that kernel has no autograd, so later training steps would
    silently get no gradient through the base weights. GPUs never take this path."""
    import bitsandbytes.nn.modules as bnb_modules

    monkeypatch.setattr(bnb_modules, "has_avx512bf16", lambda: False)


def _check_run(out, results, algorithm, steps):
    steps = steps or len([r for r in read_metrics(out) if "loss" in r])  # epochs: one loss row per step
    assert results["algorithm"] == algorithm and results["steps"] == steps >= 1 and not results["interrupted"]
    losses = [r["loss"] for r in read_metrics(out) if "loss" in r]
    assert losses and all(math.isfinite(x) for x in losses)
    adapter = json.loads((out / "adapter_config.json").read_text())
    targets = {name.rsplit(".", 1)[-1] for name in adapter["target_modules"]}
    # Every decoder linear; a token-classification head may also be matched by PEFT's all-linear (it
    # trains in full anyway, as modules_to_save).
    assert ALL_LINEAR <= targets <= ALL_LINEAR | {"score"}, adapter["target_modules"]
    assert not (out / "model.safetensors").exists(), "a LoRA run saves the adapter, not a full copy"
    return adapter


@pytest.mark.parametrize("algorithm", REPRESENTATIVES)
def test_lora_runs_in_every_family(algorithm, tmp_path):
    out = tmp_path / algorithm
    extra = _small(algorithm)
    results = run_recipe(f"{algorithm}.yaml", out, "--use_peft", "true", "--activation_checkpointing", "true", *extra)
    _check_run(out, results, algorithm, _tiny_steps(algorithm))


@pytest.mark.parametrize("algorithm", REPRESENTATIVES)
def test_qlora_runs_in_every_family(algorithm, tmp_path, _bnb_cpu_training):
    out = tmp_path / algorithm
    extra = _small(algorithm)
    results = run_recipe(f"{algorithm}.yaml", out, "--use_peft", "true", "--load_in_4bit", "true",
                         "--dtype", "bfloat16", *extra)
    _check_run(out, results, algorithm, _tiny_steps(algorithm))
    import yaml

    resolved = yaml.safe_load((out / "config.yaml").read_text())
    assert resolved["load_in_4bit"] is True and resolved["lora_target_modules"] == ["all-linear"]


# ---------------------------------------------------------------------------------------
# The reference model under LoRA: the base model with the adapter disabled, no second copy.


def _build(algorithm: str, tmp_path, *extra: str, peft: bool = True):
    from rlhf_recipes.config import load_recipe
    from rlhf_recipes.data import load_splits
    from rlhf_recipes.models import load_tokenizer
    from rlhf_recipes.registry import family_of

    argv = [f"recipes/{algorithm}.yaml", "--profile", "tiny", "--output_dir", str(tmp_path / algorithm),
            "--eval_strategy", "no", *(["--use_peft", "true", "--lora_dropout", "0"] if peft else []), *extra]
    recipe = load_recipe(argv)
    tokenizer = load_tokenizer(recipe.model)
    train, _ = load_splits(recipe)
    family = family_of(recipe.algorithm)
    torch.manual_seed(0)
    model = family.load_model(recipe, tokenizer)
    trainer = family.build_trainer(recipe, model, tokenizer, train, None, [])
    return recipe, trainer


def _perturb_adapters(model) -> None:
    """LoRA's B starts at zero, which makes the policy equal to the base; move it."""
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.add_(0.5 * torch.randn_like(p))


def _response_logps(model, input_ids, attention_mask, completion_mask) -> torch.Tensor:
    with torch.no_grad():
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits.float()
    logp = torch.log_softmax(logits[:, :-1], -1).gather(-1, input_ids[:, 1:, None]).squeeze(-1)
    return (logp * completion_mask[:, 1:].float()).sum(1)


def _count_models(trainer) -> int:
    """Distinct nn.Modules holding a full set of weights that the trainer keeps."""
    models = {id(trainer.model)}
    ref = getattr(trainer, "ref_model", None)
    if ref is not None:
        models.add(id(ref))
    return len(models)


@pytest.mark.parametrize("algorithm", ["dpo", "kto"])  # TRL's DPOTrainer and our BookDPOTrainer
def test_lora_reference_is_the_adapter_disabled_base(algorithm, tmp_path):
    from rlhf_recipes.models import load_causal_lm

    recipe, trainer = _build(algorithm, tmp_path)
    assert trainer.ref_model is None and _count_models(trainer) == 1, "no second copy of the model"
    model = trainer.model
    _perturb_adapters(model)
    batch = next(iter(trainer.get_train_dataloader()))
    ref_c, ref_r = trainer.compute_ref_log_probs(model, batch)
    base = load_causal_lm(recipe.model).eval()
    args = (batch["input_ids"], batch["attention_mask"], batch["completion_mask"])
    expected = _response_logps(base, *args)
    policy = _response_logps(model.eval(), *args)
    assert torch.allclose(torch.cat([ref_c, ref_r]), expected, atol=1e-4), "reference = base model, adapter off"
    assert (policy - expected).abs().max() > 1e-2, "the adapter must change the policy for this test to mean anything"


def test_lora_reference_in_policy_gradients_is_the_base(tmp_path):
    """GRPO with a KL term (beta > 0) and LoRA: the reference log-probs come from the base model."""
    from rlhf_recipes.models import load_causal_lm

    recipe, trainer = _build("grpo", tmp_path, "--beta", "0.1", *SMALL_ROLLOUT)
    assert trainer.ref_model is None and _count_models(trainer) == 1
    _perturb_adapters(trainer.model)
    batch = next(iter(trainer.get_train_dataloader()))
    output = trainer._generate_and_score_completions(batch)
    ids = torch.cat([output["prompt_ids"], output["completion_ids"]], 1)
    mask = torch.cat([output["prompt_mask"], output["completion_mask"]], 1)
    base = load_causal_lm(recipe.model).eval()
    with torch.no_grad():
        logits = base(input_ids=ids, attention_mask=mask).logits.float()
    n = output["completion_ids"].size(1)
    logp = torch.log_softmax(logits[:, -n - 1:-1], -1).gather(-1, output["completion_ids"][..., None]).squeeze(-1)
    keep = output["completion_mask"].bool()
    assert torch.allclose(output["ref_per_token_logps"][keep], logp[keep], atol=1e-4)


def test_qlora_keeps_one_4bit_base_and_no_reference_copy(tmp_path, _bnb_cpu_training):
    import bitsandbytes as bnb

    _, trainer = _build("dpo", tmp_path, "--load_in_4bit", "true", "--dtype", "bfloat16")
    assert trainer.ref_model is None and _count_models(trainer) == 1
    linears = [m for m in trainer.model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    assert len(linears) == 7 * trainer.model.config.num_hidden_layers
    trainable = {p.dtype for p in trainer.model.parameters() if p.requires_grad}
    assert trainable == {torch.bfloat16}, "TRL keeps QLoRA adapters in bf16"


@pytest.mark.parametrize("algorithm", ["dpo", "orm"])  # TRL's trainer path and our plain-Trainer subclass
@pytest.mark.parametrize("reentrant", [False, True])  # True: what TRL forces under ZeRO-3 + PEFT
def test_checkpointing_with_lora_gives_the_same_gradients(algorithm, reentrant, tmp_path):
    grads = {}
    for checkpointing in (False, True):
        extra = ["--activation_checkpointing", str(checkpointing).lower()]
        if reentrant:
            extra += ["--activation_checkpointing_kwargs", '{"use_reentrant": true}']
        _, trainer = _build(algorithm, tmp_path / str(checkpointing), *extra)
        model = trainer.model
        _perturb_adapters(model)  # with B = 0 (LoRA's start), A would get no gradient either way
        model.train()
        if checkpointing:  # what Trainer.train() does first, with the trainer's settings
            kwargs = dict(trainer.args.activation_checkpointing_kwargs or {}) or None
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        assert model.is_activation_checkpointing == checkpointing
        batch = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
        model.zero_grad()
        trainer.compute_loss(model, batch).backward()
        grads[checkpointing] = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    assert grads[True].keys() == grads[False].keys()
    missing = [n for n, g in grads[True].items() if "lora_" in n and not g.abs().sum() > 0]
    assert not missing, f"no gradient under checkpointing: {missing[:3]}"
    for name, g in grads[False].items():
        assert torch.allclose(grads[True][name], g, atol=1e-6, rtol=1e-4), name


# ---------------------------------------------------------------------------------------
# Several real processes (gloo): ZeRO-3 in every family, and 1 vs 2 processes.

SAME_RUN = ["--max_steps", "3", "--warmup_steps", "0", "--learning_rate", "1e-4"]
# Float tolerance for 2 processes against 1: the same four pairs per step and the same averaged
# gradient; only the order of the gradient all-reduce differs (measured: ~1e-7 relative for DDP,
# ~1e-6 for ZeRO-3, whose fp32 master weights and partitioned reduce round differently).
REL_TOL, ABS_TOL = 1e-4, 1e-4


@pytest.mark.multiprocess
def test_dpo_one_and_two_processes_give_the_same_steps_under_zero3(tmp_path):
    """Same effective batch, and the same losses and log-probs step by step (DPO is deterministic:
    no dropout, no sampling). Step 1's loss is log 2 (policy = reference), so the comparison covers
    steps 2-3, which depend on the averaged gradient of the steps before. (DDP's version is
    tests/test_multinode.py's DPO on two SLURM nodes.) Launched as on a fresh machine (an empty torch extensions
    cache), the ZeRO-3 processes build no C++ op: DeepSpeed's shared-memory all-reduce, which training never calls,
    is not compiled on a CPU (rlhf_recipes/cpu_launch.py; it was, ~47 CPU-s, at every machine's first launch)."""
    single = run_recipe("dpo.yaml", tmp_path / "one", *SAME_RUN)
    out = tmp_path / "two"
    extensions = tmp_path / "torch_extensions"
    launch("zero3_2proc.yaml", "dpo.yaml", out, *SAME_RUN, env={"TORCH_EXTENSIONS_DIR": str(extensions)})
    assert not extensions.exists() or not any(extensions.rglob("*.so")), sorted(extensions.rglob("*"))
    double = json.loads((out / "final_results.json").read_text())
    assert single["world_size"] == 1 and double["world_size"] == 2
    assert single["effective_batch_size"] == double["effective_batch_size"] == 4
    assert (single["gradient_accumulation_steps"], double["gradient_accumulation_steps"]) == (2, 1)
    assert single["steps"] == double["steps"] == 3 and not double["interrupted"]
    rows = {}
    for name, path in (("one", tmp_path / "one"), ("two", out)):
        rows[name] = {r["step"]: r for r in read_metrics(path) if "loss" in r}
    assert sorted(rows["one"]) == sorted(rows["two"]) == [1, 2, 3]
    assert rows["one"][1]["loss"] == pytest.approx(math.log(2), abs=1e-6)
    assert rows["one"][3]["loss"] < rows["one"][1]["loss"] - 1e-3, "the run must move for the comparison to mean much"
    for step in (1, 2, 3):
        a, b = rows["one"][step], rows["two"][step]
        for key in ("loss", "logps/chosen", "logps/rejected", "grad_norm"):
            assert b[key] == pytest.approx(a[key], rel=REL_TOL, abs=ABS_TOL), (step, key)
        assert b["rewards/margins"] == pytest.approx(a["rewards/margins"], abs=ABS_TOL), step


ZERO3 = [
    # (recipe, extra flags, what it covers). Elsewhere: GRPO under ZeRO-3 (LoRA, generation without gathering,
    # reentrant checkpointing, a frozen reward model) is tests/test_zero3_frozen_models.py's run, and PPO's run
    # below takes the same trainer's generation with the full weights gathered; our reward-model trainer (ORM) and
    # its final evaluation on partitioned weights is tests/test_rm_recipes.py's ORM run (against one process); SFT,
    # SDPO and DPO have theirs in their own files and above.
    ("preference_rm.yaml", [], "TRL's RewardTrainer (not ours, as ORM's is), its final evaluation on partitioned weights"),
]
if "ppo" in ALGORITHMS:
    ZERO3.append(("ppo.yaml", ["--value_optimizer", "separate"],  # DeepSpeed owns the policy's optimizer
                  "policy, value model (its own optimizer) and generation under ZeRO-3"))


@pytest.mark.multiprocess
@pytest.mark.parametrize("recipe, extra, covers", ZERO3, ids=[r for r, _, _ in ZERO3])
def test_zero3_two_processes(recipe, extra, covers, tmp_path):
    out = tmp_path / recipe.split(".")[0]
    launch("zero3_2proc.yaml", recipe, out, *extra, timeout=420)  # a generation hang would end here
    results = json.loads((out / "final_results.json").read_text())
    assert results["world_size"] == 2, "a silent fallback to one process"
    steps = next((int(v) for k, v in zip(extra, extra[1:]) if k == "--max_steps"), 4)
    assert results["steps"] == steps and not results["interrupted"]
    assert all(math.isfinite(r["loss"]) for r in read_metrics(out) if "loss" in r)
    if recipe.startswith("preference_rm"):
        assert 0.0 <= results["evaluation"]["accuracy"] <= 1.0
