"""Suggestions for a plan that does not fit, and the printed report (rich)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from rlhf_recipes.tools.planner.launch import Launch
from rlhf_recipes.tools.planner.memory import GiB
from rlhf_recipes.tools.planner.plan import Plan, plan_recipe

ZERO3_CONFIG = "accelerate_configs/zero3.yaml"


@dataclass
class Suggestion:
    change: str  # what to do, as the user types it
    plan: Plan

    @property
    def keeps_meaning(self) -> bool:
        """Checkpointing, micro-batch and sharding leave the optimization unchanged; LoRA/4-bit do not."""
        return "use_peft" not in self.change and "load_in_4bit" not in self.change


def _candidates(plan: Plan) -> list[tuple[str, str, list[str], Launch]]:
    """(kind, description, extra recipe flags, launch) to try, least invasive kind first; within a
    kind, the mildest change first (the first that fits is reported)."""
    training, launch = plan.recipe.training, plan.launch
    ckpt = ["--activation_checkpointing", "true"]
    ckpt_options = [[]] if training.activation_checkpointing else [[], ckpt]
    out = [] if training.activation_checkpointing else [("checkpointing", " ".join(ckpt), ckpt, launch)]
    for with_ckpt in ckpt_options:
        batch = training.per_device_train_batch_size
        while batch > 1:
            batch //= 2
            flags = [*with_ckpt, "--per_device_train_batch_size", str(batch)]
            out.append(("micro-batch", " ".join(flags) + " (effective_batch_size kept: more accumulation)", flags,
                        launch))
    changes = []  # (kind, description, flags, launch): each tried as it is, then with checkpointing where it is off
    if not launch.zero3:
        gpus = launch.processes if launch.processes > 1 else 4
        zero3 = Launch(source=ZERO3_CONFIG, processes=gpus, distributed="DEEPSPEED", zero_stage=3,
                       mixed_precision=launch.mixed_precision)
        desc = f"--config_file {ZERO3_CONFIG}" + ("" if launch.processes > 1 else " on 4 GPUs")
        changes += [("zero3", desc, [], zero3), ("zero3-offload", f"{desc} with offload_optimizer_device: cpu", [],
                                                 replace(zero3, offload_optimizer=True))]
    if not plan.recipe.model.use_peft:
        changes.append(("lora", "--use_peft true", ["--use_peft", "true"], launch))
        if launch.distributed != "DEEPSPEED":
            changes.append(("qlora", "--use_peft true --load_in_4bit true",
                            ["--use_peft", "true", "--load_in_4bit", "true"], launch))
    return out + [(kind, " ".join([desc, *with_ckpt]), [*flags, *with_ckpt], to)
                  for kind, desc, flags, to in changes for with_ckpt in ckpt_options]


def suggest(argv: list[str], plan: Plan, limit: int = 5, prompt_len: int | None = None) -> list[Suggestion]:
    """Settings that make the recipe fit, each re-planned (not guessed): the first that fits of each kind
    (checkpointing, a smaller micro-batch, ZeRO-3, ZeRO-3 with CPU optimizer, LoRA, QLoRA). Empty when the
    recipe already fits."""
    if plan.verdict == "fits":
        return []
    found: list[Suggestion] = []
    done: set[str] = set()
    for kind, desc, flags, launch in _candidates(plan):
        if kind in done:
            continue
        try:
            candidate = plan_recipe([*argv, *flags], launch, plan.capacity_gib, prompt_len=prompt_len, shape=plan.shape)
        except Exception:  # e.g. an effective batch the new world size cannot split
            continue
        if candidate.verdict == "fits":
            found.append(Suggestion(desc, candidate))
            done.add(kind)
        if len(found) >= limit:
            break
    return found


def gib(x: float) -> str:
    return f"{x / GiB:.2f}"


def render(plan: Plan, suggestions: list[Suggestion] | None = None, console=None) -> None:
    from rich.console import Console

    from rlhf_recipes.tools.document import table as new_table

    console = console or Console()
    r = plan.recipe
    t = r.training
    effective = t.per_device_train_batch_size * t.gradient_accumulation_steps * plan.launch.processes
    console.print(f"[bold]{Path(r.source).name}[/bold]: {r.algorithm.name} on {plan.shape.name} "
                  f"({plan.shape.total_params() / 1e9:.2f}B params; shape from {plan.shape.source})")
    console.print(f"launch: {plan.launch.describe()} ({plan.launch.source}); micro-batch "
                  f"{t.per_device_train_batch_size} x accumulation {t.gradient_accumulation_steps} x "
                  f"{plan.launch.processes} GPU(s) = effective batch {effective}; dtype {r.model.dtype}; "
                  f"activation checkpointing {'on' if t.activation_checkpointing else 'off'}"
                  f"{'; LoRA' if r.model.use_peft else ''}{' on a 4-bit base' if r.model.load_in_4bit else ''}")
    table = new_table("predicted memory per GPU (GiB)", ("term", "phase", "GiB", "how"),
                      ((t.name, t.phase, gib(t.bytes), t.formula) for t in plan.terms), right=("GiB",))
    for phase, value in plan.phases.items():
        table.add_row(f"[bold]peak during {phase}[/bold]", "", f"[bold]{gib(value)}[/bold]",
                      "resident + this phase's terms")
    table.add_row("required on the GPU", "", gib(plan.required_bytes),
                  "allocated peak x 1.10 (allocator) + CUDA context/NCCL")
    console.print(table)
    for note in plan.notes:
        console.print(f"  note: {note}")
    for warning in plan.warnings:
        console.print(f"  [yellow]warning: {warning}[/yellow]")
    colour = {"fits": "green", "tight": "yellow", "does not fit": "red"}[plan.verdict]
    gpu = "48 GB A6000" if plan.capacity_gib == 48 else f"{plan.capacity_gib:g} GiB GPU"
    console.print(f"[{colour}][bold]verdict: {plan.verdict}[/bold][/{colour}] on a {gpu}: needs about "
                  f"{gib(plan.required_bytes)} GiB per GPU, peak during {plan.peak_phase}.")
    if suggestions is None:
        return
    if plan.verdict != "fits" and not suggestions:
        console.print("  no single change found that fits; combine the options below or use a smaller model.")
    if suggestions:
        console.print("[bold]to make it fit[/bold] (each re-planned; the first ones keep the recipe's optimization):")
        for s in suggestions:
            tag = "" if s.keeps_meaning else " \\[changes what is trained]"
            console.print(f"  {s.change}: {gib(s.plan.required_bytes)} GiB ({s.plan.verdict}){tag}")
