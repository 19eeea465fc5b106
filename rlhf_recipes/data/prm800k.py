"""PRM800K (openai/prm800k, tasksource/PRM800K) -> stepwise prompt / completions / labels.

Real schema: one labeled solution per row; `question.problem` is the problem and
`label.steps[i]` holds the rated candidate steps at position i. The solution path follows
the dataset README: per step, `completions[chosen_completion]`, or the labeler's own
`human_completion` when chosen_completion is null (phase 1 lets labelers write a step when every
candidate was rated -1; such a step counts as +1). A trajectory ends at a step with neither
(the last step of a "found_error" or "give_up" solution): that step is `completions[0]`, the
one on the presented path (in phase 2 the pre-generated step), with its rating, usually the -1
that ended the labeling. A step without a rating ends the trajectory before it.

Output, TRL's stepwise-supervision columns: `prompt` (the problem text; the PRM recipe's
`prompt_template` formats it), `completions` (the step texts) and `labels` (ratings -1/0/+1).
Rows with no labeled step (e.g. "bad_problem") are dropped and counted.

On the hub (tasksource/PRM800K) the data is four raw files, phase1_{train,test}.jsonl and
phase2_{train,test}.jsonl, read line by line, phase 1 first (data/hub_files.py): the first
`num_samples` usable rows in file order, as the book takes them.

Where the book differs: its get_steps_and_labels appends every rated completion of each step
(the chosen one and the rejected alternatives, one after the other) to the trace; this adapter
follows the one path the labeler took, so a trace reads as a solution.
"""

from __future__ import annotations

from typing import Any

from rlhf_recipes.data.base import DROP, DataSource

HUMAN_STEP_RATING = 1  # "we allowed labelers to write their own +1 step" (dataset README)


def _text(value: Any, where: str) -> str:
    if isinstance(value, dict):
        value = value.get("text")
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: step text must be a non-empty string, got {value!r:.80}")
    return value


def solution_path(steps: Any) -> tuple[list[str], list[int]]:
    """The labeled trajectory of `label.steps`: (step texts, ratings)."""
    if not isinstance(steps, list):
        raise ValueError(f"column `label.steps` must be a list, got {type(steps).__name__}")
    texts: list[str] = []
    ratings: list[int] = []
    for i, step in enumerate(steps):
        where = f"label.steps[{i}]"
        if not isinstance(step, dict):
            raise ValueError(f"{where} must be an object, got {type(step).__name__}")
        completions = step.get("completions") or []
        chosen, human = step.get("chosen_completion"), step.get("human_completion")
        last = False
        if chosen is not None:
            if isinstance(chosen, bool) or not isinstance(chosen, int) or not 0 <= chosen < len(completions):
                raise ValueError(f"{where}.chosen_completion {chosen!r} is not an index into its "
                                 f"{len(completions)} completions")
            text = _text(completions[chosen], f"{where}.completions[{chosen}]")
            rating = completions[chosen].get("rating")
        elif human is not None:
            text, rating = _text(human, f"{where}.human_completion"), HUMAN_STEP_RATING
        elif completions:  # the labeler stopped at this step
            text, rating, last = _text(completions[0], f"{where}.completions[0]"), completions[0].get("rating"), True
        else:
            break
        if rating is None:
            break
        if isinstance(rating, bool) or rating not in (-1, 0, 1):
            raise ValueError(f"{where}: rating must be -1, 0 or +1, got {rating!r}")
        texts.append(text)
        ratings.append(int(rating))
        if last:
            break
    return texts, ratings


def normalize(row: dict[str, Any]) -> dict[str, Any]:
    question, label = row["question"], row["label"]
    problem = question.get("problem") if isinstance(question, dict) else None
    if not isinstance(problem, str) or not problem.strip():
        raise ValueError(f"column `question` must be an object with a non-empty `problem`, got {question!r:.80}")
    if not isinstance(label, dict) or "steps" not in label:
        raise ValueError(f"column `label` must be an object with `steps`, got {label!r:.80}")
    texts, ratings = solution_path(label["steps"])
    if not texts:
        return {DROP: f"no labeled steps (finish_reason {label.get('finish_reason')!r})"}
    return {"prompt": question["problem"], "completions": texts, "labels": ratings}


SOURCE = DataSource(
    name="prm800k",
    hub_id="tasksource/PRM800K",
    fixture="prm800k/train.jsonl",
    columns=("question", "label"),
    normalize=normalize,
    # Phase 2's `question` has fields phase 1's lacks: datasets cannot merge the files into one split. A split's
    # raw files, phase 1 first (the repo's file order, which the book reads):
    hub_files=lambda split: (f"phase1_{split}.jsonl", f"phase2_{split}.jsonl"),
)
