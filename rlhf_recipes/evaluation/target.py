"""Training to a held-out target instead of to a step count (the nano SFT base, rlhf_recipes/nano.py).

A base stopped at a fixed step on the steep part of its learning curve lands wherever the machine's float rounding
puts it (the nano base at 145 steps: 21% held-out exact match on one CPU, 14.5% on another). Stopped by a
measurement instead, it lands at the same accuracy on every machine, give or take the curve's rise between two
evaluations. The rule (`TargetSelection`, pure; `select` runs it over a whole curve):
  - evaluate every `every` optimizer steps on `problems` fixed held-out problems (greedy, the evaluator the nano
    tables use; `split: validation`: problems of the same draw that no table reports), and every `fine_every` steps
    from the first evaluation at or above `fine_from` on (cheap while the model is far below the band, fine where the
    curve is steep);
  - keep the checkpoint whose value is closest to `target` among those inside `band` (the earliest on a tie);
  - stop at the first evaluation above the band (the curve rises; later checkpoints are further away);
  - no checkpoint inside the band (the run ended below it, or one evaluation jumped over it): an error that shows
    the curve, never a silent base outside the band.
`target` None: no selection; the run trains its steps and is measured once at the end (the record still says
where it landed). `HeldoutTarget` applies the rule during a run (a periodic-evaluation callback): it copies the
kept weights in memory (0.7M parameters: a few MB), puts them back into the model when training ends, so the
runner saves the kept checkpoint, and writes the record (`RECORD`) beside the model.
"""

from __future__ import annotations

import json
import platform
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rlhf_recipes.evaluation.callback import PeriodicEvaluation

RECORD = "base_target.json"  # beside the saved model: what was measured, which step was kept, how it was built


@dataclass(frozen=True)
class Goal:
    """Where a build should land, measured by `recipe`'s held-out evaluator with `--profile nano`."""

    target: float | None  # the value to land closest to; None: train the recipe's steps, measure at the end
    band: tuple[float, float] = (0.0, 1.0)  # the kept checkpoint's value must lie inside [low, high]
    every: int = 1  # evaluate every N optimizer steps
    fine_from: float | None = None  # from the first value at or above this on, evaluate every `fine_every` steps
    fine_every: int = 1
    problems: int = 200  # the first N held-out problems (the nano tables: 200)
    metric: str = "exact_match"
    recipe: str = "grpo"  # whose held-out evaluator (recipes/<recipe>.yaml --profile nano; the nano-book tables')
    split: str = "heldout"  # "validation": measured on problems the tables never report (evaluation/reasoning.py)

    def __post_init__(self):
        low, high = self.band
        if self.target is not None and not low <= self.target <= high:
            raise ValueError(f"target {self.target} lies outside its band [{low}, {high}]")
        if self.split not in ("heldout", "validation"):
            raise ValueError(f"split {self.split!r}: expected heldout (the test problems) or validation")
        if min(self.every, self.fine_every, self.problems) < 1:
            raise ValueError(f"every ({self.every}), fine_every ({self.fine_every}) and problems ({self.problems}) "
                             "must be at least 1")

    def describe(self) -> dict[str, Any]:
        return {**asdict(self), "band": list(self.band)}


class TargetMissed(RuntimeError):
    """No evaluated checkpoint lay inside the band."""


class TargetSelection:
    """The rule, fed one evaluation at a time: observe() says whether to keep this checkpoint and whether to stop."""

    def __init__(self, goal: Goal):
        self.goal = goal
        self.curve: list[tuple[int, float]] = []
        self.best: tuple[int, float] | None = None
        self.fine = False  # evaluating every fine_every steps now

    def due(self, step: int) -> bool:
        """Whether to evaluate after this optimizer step."""
        return step % (self.goal.fine_every if self.fine else self.goal.every) == 0

    def observe(self, step: int, value: float) -> tuple[bool, bool]:
        """(keep this checkpoint, stop training)."""
        self.curve.append((step, value))
        self.fine = self.fine or (self.goal.fine_from is not None and value >= self.goal.fine_from)
        low, high = self.goal.band
        if value > high:
            return False, True
        closer = self.best is None or abs(value - self.goal.target) < abs(self.best[1] - self.goal.target)
        keep = value >= low and closer
        if keep:
            self.best = (step, value)
        return keep, False

    def chosen(self) -> tuple[int, float]:
        if self.best is None:
            low, high = self.goal.band
            curve = ", ".join(f"{s}: {v:.3f}" for s, v in self.curve) or "no evaluation"
            raise TargetMissed(f"no checkpoint's held-out {self.goal.metric} lay inside [{low}, {high}] (target "
                               f"{self.goal.target}); step: value = {curve}. Ended below the band: raise max_steps; "
                               f"jumped over it: evaluate more often (every {self.goal.every}, fine_every "
                               f"{self.goal.fine_every} from {self.goal.fine_from})")
        return self.best


def select(curve: list[tuple[int, float]], goal: Goal) -> dict[str, Any]:
    """The rule over a whole (step, value) curve: the kept step and value, and the step it stopped at."""
    rule = TargetSelection(goal)
    for step, value in curve:
        _, stop = rule.observe(step, value)
        if stop:
            break
    step, value = rule.chosen()
    return {"step": step, "value": value, "stopped_at": rule.curve[-1][0]}


class HeldoutTarget(PeriodicEvaluation):
    """The rule during a run: evaluations logged as eval/<metric> (as eval_every's), the kept weights restored at the
    end, the record written beside the model."""

    def __init__(self, evaluator, goal: Goal, built_by: dict[str, Any]):
        super().__init__(evaluator, goal.every)
        self.goal = goal
        self.built_by = built_by  # how the build was asked for (the recipe, its overrides), for the record
        self.rule = TargetSelection(goal) if goal.target is not None else None
        self.kept: dict | None = None
        self.kept_interval: dict | None = None

    def due(self, step: int) -> bool:
        return self.rule is not None and self.rule.due(step)  # without a target: measured once, at the end

    def observe(self, state, control, model, metrics):
        keep, stop = self.rule.observe(state.global_step, metrics[self.goal.metric])
        if keep:
            self.kept = {k: v.detach().clone() for k, v in model.state_dict().items()}
            self.kept_interval = self.last_intervals[self.goal.metric]
        if stop:
            control.should_training_stop = True

    def on_train_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        if not state.is_world_process_zero:
            return
        if self.rule is None:
            metrics = self.measure(model, processing_class)
            step, value, interval, curve = state.global_step, metrics[self.goal.metric], \
                self.last_intervals[self.goal.metric], [(state.global_step, metrics[self.goal.metric])]
        else:
            step, value = self.rule.chosen()  # TargetMissed fails the build, with the curve
            model.load_state_dict(self.kept)  # the runner saves the model after this: the kept checkpoint
            interval, curve = self.kept_interval, self.rule.curve
        import torch

        goal, (_, data) = self.goal, self.evaluator.data()
        record = {
            "what": f"held-out {goal.metric} of this model, measured while it was built (greedy, "
                    f"`rlhf-recipes evaluate MODEL --recipe recipes/{goal.recipe}.yaml --profile nano "
                    f"--num_problems {goal.problems} --batch_size {self.evaluator.options.batch_size}"
                    + (" --split validation" if goal.split == "validation" else "") + "` gives the same)",
            "metric": goal.metric, "value": value, "interval": [interval["low"], interval["high"]],
            "interval_method": interval["method"], "step": step, "steps_trained": state.global_step,
            "goal": goal.describe(),
            "rule": "closest to target inside band, stop at the first evaluation above it" if goal.target is not None
            else "no target: trained the recipe's steps, measured at the end",
            "curve": [[s, v] for s, v in curve], "heldout": data, "built_by": self.built_by,
            "machine": {"torch": torch.__version__, "torch_threads": torch.get_num_threads(),
                        "processor": processor()},
        }
        (Path(args.output_dir) / RECORD).write_text(json.dumps(record, indent=2), encoding="utf-8")


def processor() -> str:
    """The CPU's model name where the system says it (Linux), else its architecture: the record's "which machine"."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
