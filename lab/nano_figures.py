"""The book's other training figures in miniature: instruction tuning, rejection sampling, distillation on nano.

    rlhf-recipes nano-figures                                      # all three, ~20 minutes on one thread per run
    rlhf-recipes nano-figures --figure instruction_tuning          # the nano base's own SFT build: no new run
    rlhf-recipes nano-figures --figure rejection_sampling --workers 2 --out outputs/nano-figures

Each figure is a family's BookFigure (lab/book_figures.py): the book's
wandb image it answers, its panels as (the book's metric, the key our runs log in metrics.jsonl), the algorithms
whose nano runs it overlays, and the held-out proof drawn beside them. The runs are jobs of the lab's executor
(lab/executor.py): `recipes/<algorithm>.yaml --profile nano --torch_threads 1` (one thread, as
the shipped runs) in <out>/<algorithm>, --workers at once; a finished run is reused, an interrupted one resumed,
unless --overwrite. instruction_tuning trains nothing: it reads the nano SFT base's build
(rlhf_recipes.nano.nano_model_path(), built once on first use).
Writes <out>/nano_<figure>.png (a panel per book metric against the optimizer step, a faint raw line and a
running mean of 10 logs per run, then the held-out panel) and <out>/nano_<figure>.json (the numbers, run folders
relative to <out>). The policy-gradient and direct-alignment figures are `rlhf-recipes nano-book`'s.
These are this project's nano runs on a CPU, never the book's 1-2B GPU runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rlhf_recipes.paths import recipe_path
from rlhf_recipes.run_folder import METRICS_FILE, has_metrics, read_metrics, read_results
from rlhf_recipes.tools.document import logs_window, points, pyplot, running_mean, save_figure, write_result
from lab.book_figures import BOOK_FIGURES, NANO_BOOK
from lab.nano_book import NANO_RUN, run_jobs

# Axis labels with units of the keys the figures draw (the keys themselves come from the registry).
UNITS = {"loss": "training loss (nats per token)", "grad_norm": "gradient L2 norm (before clipping)",
         "epoch": "epoch (passes over the selected completions)",
         "reward": "correctness reward of the step's groups (0-1)",
         "eval/exact_match": "held-out exact match (% of problems, greedy)"}


def figures() -> dict[str, str]:
    """{figure name: family} of the registry's book figures that nano-book does not draw, in registry order."""
    from rlhf_recipes.registry import FAMILIES

    return {BOOK_FIGURES[f].name: f for f in FAMILIES if f in BOOK_FIGURES and f not in NANO_BOOK}


def figure_of(name: str):
    return BOOK_FIGURES[figures()[name]]


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="rlhf-recipes nano-figures", description=__doc__, allow_abbrev=False,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--figure", help="comma-separated figures (default: all of " + ", ".join(figures()) + ")")
    parser.add_argument("--out", type=Path, default=Path("outputs/nano-figures"), help="output folder")
    parser.add_argument("--workers", type=int, help="runs at once (default: one per core)")
    parser.add_argument("--overwrite", action="store_true", help="train again even where a run finished")
    args = parser.parse_args(argv)
    known = figures()
    args.figure_list = [f.strip() for f in args.figure.split(",")] if args.figure else list(known)
    unknown = [f for f in args.figure_list if f not in known]
    if unknown:
        parser.error(f"--figure: {', '.join(unknown)} unknown; expected some of {', '.join(known)} "
                     "(policy_gradients and direct_alignment: rlhf-recipes nano-book --family)")
    if args.workers is not None and args.workers <= 0:
        parser.error(f"--workers must be > 0, got {args.workers}")
    return args


def jobs(args: argparse.Namespace) -> list:
    """One executor job per algorithm of the chosen figures: train on nano into <out>/<algorithm>."""
    from lab.executor import Job

    names = [a for f in args.figure_list for a in figure_of(f).algorithms]
    return [Job(a, args.out / a, (str(recipe_path(a)), *NANO_RUN)) for a in names]


def read_run(name: str, folder: Path, figure) -> dict[str, Any]:
    """One run's curves of the figure's keys and its held-out numbers."""
    if not has_metrics(folder):
        raise FileNotFoundError(f"{folder} has no {METRICS_FILE}: not a finished run (train it with "
                                f"`rlhf-recipes nano-figures --figure {figure.name}`)")
    rows = read_metrics(folder)
    keys = [k for _, k in figure.panels] + ([figure.heldout_curve] if figure.heldout_curve else [])
    out: dict[str, Any] = {"name": name, "curves": {k: points(rows, k) for k in keys}}
    final = read_results(folder) or {}
    out["wall_s"] = final.get("wall_seconds")
    if figure.heldout_final:
        after, before = figure.heldout_final
        out["heldout"] = {"metric": after, "after": final.get(after), "before": final.get(before),
                          "problems": final.get("eval_questions")}
    return out


def summarize(run: dict[str, Any]) -> dict[str, Any]:
    """Per key: steps, first and last value, and the means of the first and last 10 logs (the shapes in numbers)."""
    def mean(values):
        return sum(values) / len(values) if values else None

    out = {}
    for key, curve in run["curves"].items():
        values = [v for _, v in curve]
        out[key] = {"logs": len(curve), "last_step": curve[-1][0] if curve else None,
                    "first": values[0] if values else None, "last": values[-1] if values else None,
                    "mean_first_10": mean(values[:10]), "mean_last_10": mean(values[-10:])}
    return out


def plot(runs: list[dict[str, Any]], figure, path: Path) -> None:
    from matplotlib.ticker import MaxNLocator

    plt = pyplot()

    panels = list(figure.panels)
    extra = 1 if (figure.heldout_curve or figure.heldout_final) else 0
    fig, axes = plt.subplots(1, len(panels) + extra, figsize=(5.2 * (len(panels) + extra), 4.6), squeeze=False)
    axes = list(axes[0])
    # logs_window: a shorter run (the base logs 27 times) is drawn raw; epoch is a step function, drawn as is
    window = {key: 1 if key == "epoch" else logs_window(r["curves"][key] for r in runs) for _, key in panels}
    for i, run in enumerate(runs):
        for axis, (_, key) in zip(axes, panels):
            points = run["curves"][key]
            steps, values = [p[0] for p in points], [p[1] for p in points]
            if window[key] > 1:
                axis.plot(steps, values, color=f"C{i}", alpha=0.2, linewidth=0.8)
                values = running_mean(values, window[key])
            axis.plot(steps, values, color=f"C{i}", label=run["name"])
    for axis, (book, key) in zip(axes, panels):
        how = f"line: running mean of {window[key]} logs, faint: raw" if window[key] > 1 else "every logged step"
        title = f"The book's {book}" + ("" if book == key else f": our {key}")
        axis.set(xlabel="optimizer step", ylabel=UNITS.get(key, key), title=f"{title}\n{how}")
    if figure.heldout_curve:
        axis, key = axes[-1], figure.heldout_curve
        for i, run in enumerate(runs):
            points = run["curves"][key]
            axis.plot([p[0] for p in points], [100 * p[1] for p in points], marker="o", markersize=3,
                      color=f"C{i}", label=run["name"])
        axis.set(xlabel="optimizer step", ylabel=UNITS.get(key, key), title=f"Held-out proof: {key}\n(not in the "
                 "book's figure)")
    elif figure.heldout_final:
        axis, names = axes[-1], [r["name"] for r in runs]
        before = [100 * r["heldout"]["before"] for r in runs]
        after = [100 * r["heldout"]["after"] for r in runs]
        x = range(len(runs))
        axis.bar([i - 0.2 for i in x], before, width=0.4, color="lightgray", label="base (before)")
        axis.bar([i + 0.2 for i in x], after, width=0.4, color=[f"C{i}" for i in x], label="after SFT")
        for i in x:
            axis.text(i + 0.2, after[i] + 0.5, f"{after[i]:.1f}", ha="center", fontsize=8)
        axis.set_xticks(list(x), names, rotation=15, fontsize=8)
        axis.set_ylim(0, 1.15 * max(before + after))  # room for the value labels under the title
        problems = runs[0]["heldout"]["problems"]
        axis.set(ylabel=f"held-out exact match (% of {problems} problems, greedy)",
                 title=f"Held-out proof: {figure.heldout_final[0]}\n(not in the book's figure)")
    for axis in axes:
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.grid(alpha=0.3)
    for axis in dict.fromkeys([axes[0], axes[-1]]):  # one color per run in every panel
        axis.legend(fontsize=8)
    fig.suptitle(f"nano_{figure.name}: the book's {figure.image} on the nano profile, spell_backward "
                 "(this project's CPU runs, not the book's)", fontsize=11)
    save_figure(fig, path)


def label(algorithm: str, figure: str) -> str:
    """The run's name in the legend: the algorithm without the figure's own name (top_k_overall, not
    rejection_sampling_top_k_overall)."""
    return algorithm.removeprefix(f"{figure}_")


def shown(folder: Path, out: Path) -> str:
    """A run's folder as the JSON records it: relative to <out> when inside it, the model cache as ~/.cache/..."""
    folder = Path(folder)
    try:
        return str(folder.relative_to(out))
    except ValueError:
        home = Path.home()
        return "~/" + str(folder.relative_to(home)) if folder.is_relative_to(home) else str(folder)


def draw(name: str, runs: list[tuple[str, Path]], out: Path) -> Path:
    """The figure `name` from finished runs [(label, folder)] into <out>/nano_<name>.png and .json."""
    figure = figure_of(name)
    read = [read_run(label, folder, figure) for label, folder in runs]
    record = {"what": f"the book's {figure.image} on the nano profile (this project's CPU runs, not the book's)",
              "book_image": figure.image, "panels": [{"book": b, "ours": k} for b, k in figure.panels],
              "heldout_curve": figure.heldout_curve, "heldout_final": figure.heldout_final,
              "runs": [{"name": r["name"], "run": shown(folder, out), "wall_s": r["wall_s"],
                        "heldout": r.get("heldout"), "summary": summarize(r)} for r, (_, folder) in zip(read, runs)]}
    write_result(record, out / f"nano_{name}.json", draw=lambda path: plot(read, figure, path),
                 figure_path=out / f"nano_{name}.png")
    return out / f"nano_{name}.png"


def main(argv: list[str] | None = None) -> int:
    from rlhf_recipes.nano import nano_model_path

    args = parse(sys.argv[1:] if argv is None else argv)
    code, _ = run_jobs(jobs(args), args.out, args.workers, args.overwrite, "nano-figures")
    if code:
        return code
    base = Path(nano_model_path())  # the base's build (instruction_tuning's run), built by run_jobs
    for name in args.figure_list:
        figure = figure_of(name)
        runs = [(label(a, name), args.out / a) for a in figure.algorithms] or [("nano SFT base (build)", base)]
        print(f"wrote {draw(name, runs, args.out)}, {args.out / f'nano_{name}.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
