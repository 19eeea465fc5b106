"""The book's figures in miniature: every recipe of a family on the nano profile, side by side.

    rlhf-recipes nano-book                               # the ten policy gradients, ~2-3 minutes each on one thread
    rlhf-recipes nano-book --family direct_alignment     # DPO and its eight relatives, ~1-2 minutes each
    rlhf-recipes nano-book --algorithms grpo,reinforce --max_steps 200 --out outputs/nano-book-quick
    rlhf-recipes nano-book --algorithms grpo,dapo --seeds 3 --workers 2     # 3 training seeds each, 2 at a time

For each algorithm of the family and each seed (default: one run at the recipe's seed, in <out>/<algorithm>), a job of
the lab's executor (lab/executor.py: a failed run never stops the others, the same command again
resumes what was interrupted and reuses what finished):
  1. train `recipes/<algorithm>.yaml --profile nano --torch_threads 1` in its own process (the normal runner; one
     torch thread, as the shipped runs: the same numbers on the same kind of CPU), with periodic greedy held-out
     evaluation logged as eval/<metric>;
  2. `rlhf-recipes evaluate RUN --baseline`: the family's held-out metrics of the run and of the nano SFT base on
     the same problems, each gain with its paired-bootstrap 95% interval (rlhf_recipes/evaluation/).
The family names the metrics (book_figures.NANO_BOOK): policy gradients, held-out exact match
and the book's training correctness reward; direct alignment, held-out preference accuracy (implicit reward),
held-out exact match and the training pairs' preference accuracy. Writes <out>/nano_book_<family>.png (a panel per
held-out metric and per training metric, a running mean, against the optimizer step; a line per algorithm),
<out>/nano_book_<family>_table.txt (also printed: base, final, gain [95% interval] per held-out metric, wall time)
and <out>/nano_book_<family>.json (every number, with the settings that produced it). With --seeds, each gain is
the mean over seeds with a 95% t interval over seeds and problems (every seed is scored on the same problems, so the
spread over seeds alone misses the problems' share of the noise: lab/stats.py gain_over_seeds, its method in the
JSON and under the table), "learns" means that interval lies above zero, and the curves are means over seeds.
--report keeps the base's build record and the settings from the JSON already there.
These are this project's nano runs, never the book's: the book's runs are 1-2B models on GPUs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rlhf_recipes.paths import recipe_path
from rlhf_recipes.run_folder import read_metrics, read_results
from rlhf_recipes.tools import document
from rlhf_recipes.tools.document import (
    logs_window, points, pyplot, render_text, running_mean, save_figure, write_result, wrote,
)
from lab.book_figures import BOOK_FIGURES, NANO_BOOK
from lab.stats import per_problem_gains

DEFAULT_FAMILY = "policy_gradient"  # the book's headline figure (chapter 6)
WALL_FILE = "nano_book_wall_s.json"
# A figure's run: the nano profile on one torch thread, as the shipped runs (reference_runs/nano) ran; the thread
# count changes a CPU run's numbers. nano-figures' runs take the same.
NANO_RUN = ("--profile", "nano", "--torch_threads", "1")
# Panel title, axis label and whether it is a rate (drawn in %) of the metrics the families name
# (book_figures.NANO_BOOK); another metric is drawn under its own name.
LABELS = {
    "exact_match": ("Held-out spell_backward accuracy (step 0: the nano base)",
                    "held-out exact match (% of problems, greedy)", True),
    "implicit_accuracy": ("Held-out preference accuracy (step 0: the nano base)",
                          "implicit reward ranks chosen first (% of held-out pairs)", True),
    "rewards/correctness_reward/mean": ("Training reward (the book's correctness_reward)",
                                        "correctness reward (0-1, running mean of 10 logs)", False),
    "reward": ("Training total reward", "correctness + 0.5 x format (0-1.5, running mean of 10 logs)", False),
    "rewards/accuracies": ("Training preference accuracy (TRL's rewards/accuracies)",
                           "pairs ranked right (0-1, running mean of 10 logs)", False),
}


def nano_algorithms(family: str = DEFAULT_FAMILY) -> list[str]:
    """The registry's algorithms of `family` (which runs on nano), in the registry's order."""
    from rlhf_recipes.registry import ALGORITHMS

    return [name for name, algorithm in ALGORITHMS.items() if algorithm.family == family]


def book_metrics(family: str) -> tuple[tuple[str, ...], str]:
    """(held-out metrics, training metric) of the family's figure and table."""
    metrics = NANO_BOOK[family]
    return metrics.heldout, metrics.training


def book_panels(family: str) -> dict[str, str]:
    """{our logged key: the book's metric} of the panels of the book's figure for this family (BOOK_FIGURES),
    drawn beside the held-out metrics under the book's name; empty where the book draws none."""
    figure = BOOK_FIGURES.get(family)
    return {key: book for book, key in figure.panels} if figure else {}


def training_keys(family: str) -> list[str]:
    """The training metrics drawn per step: the family's nano_book_training, then the book's panels not already it."""
    _, training = book_metrics(family)
    return [training, *(k for k in book_panels(family) if k != training)]


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="rlhf-recipes nano-book", description=__doc__, allow_abbrev=False,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", default=DEFAULT_FAMILY,
                        help=f"the family whose recipes to run (default {DEFAULT_FAMILY}); one that runs on nano")
    parser.add_argument("--algorithms", help="comma-separated subset (default: every algorithm of the family)")
    parser.add_argument("--out", type=Path, default=Path("outputs/nano-book"), help="output folder")
    parser.add_argument("--max_steps", type=int, help="optimizer steps per run (default: the nano profile's)")
    parser.add_argument("--eval_every", type=int, default=50, help="held-out evaluation every N optimizer steps")
    parser.add_argument("--eval_problems", type=int, default=100, help="problems per periodic evaluation")
    parser.add_argument("--num_problems", type=int, default=200, help="problems of the final before/after evaluation")
    parser.add_argument("--seeds", type=int,
                        help="training seeds per algorithm: seeds 0..N-1, in <out>/<algorithm>/seed-<s>")
    parser.add_argument("--workers", type=int, help="runs at once (default: one per core)")
    parser.add_argument("--overwrite", action="store_true", help="train again even where a run finished")
    parser.add_argument("--report", action="store_true", help="train nothing: redraw the JSON, table and figure from "
                        "the evaluated run folders under --out (the same --family, --algorithms and --seeds)")
    args = parser.parse_args(argv)
    from rlhf_recipes.profiles import read_profile
    from rlhf_recipes.registry import FAMILIES

    # the families the nano profile runs that have nano-book metrics, in the registry's order
    families = [f for f in FAMILIES if read_profile("nano").runs(f) and f in NANO_BOOK]
    if args.family not in families:
        parser.error(f"--family: {args.family} does not run on nano; expected one of {', '.join(families)}")
    available = nano_algorithms(args.family)
    args.algorithm_list = [a.strip() for a in args.algorithms.split(",")] if args.algorithms else available
    unknown = [a for a in args.algorithm_list if a not in available]
    if unknown:
        parser.error(f"--algorithms: {', '.join(unknown)} are not {args.family} algorithms that run on nano; "
                     f"expected some of {', '.join(available)}")
    for flag in ("max_steps", "eval_every", "eval_problems", "num_problems", "seeds", "workers"):
        value = getattr(args, flag)
        if value is not None and value <= 0:
            parser.error(f"--{flag} must be > 0, got {value}")
    return args


def jobs(args: argparse.Namespace) -> list:
    """One executor job per algorithm x seed: train on nano with periodic held-out evaluation, then
    `rlhf-recipes evaluate RUN --baseline` into RUN/eval/nano_book.json. Without --seeds: the recipe's own seed in
    <out>/<algorithm> (the layout of reference_runs/nano); with --seeds N: <out>/<algorithm>/seed-<s>, s < N."""
    from lab.executor import Job

    out = []
    for algorithm in args.algorithm_list:
        train = [str(recipe_path(algorithm)), *NANO_RUN,
                 "--eval_every", str(args.eval_every), "--eval_problems", str(args.eval_problems),
                 *(["--max_steps", str(args.max_steps)] if args.max_steps else [])]
        evaluate = ("--num_problems", str(args.num_problems), "--batch_size", "50")
        for seed in (range(args.seeds) if args.seeds else [None]):
            folder = args.out / algorithm if seed is None else args.out / algorithm / f"seed-{seed}"
            name = algorithm if seed is None else f"{algorithm}/seed-{seed}"
            out.append(Job(name, folder, tuple(train + ([] if seed is None else ["--seed", str(seed)])), evaluate,
                           eval_name="nano_book"))
    return out


def wall_seconds(run: Path) -> float:
    """The run's recorded wall time (training process and evaluation), else its trainer's time."""
    timing = run / WALL_FILE
    if timing.exists():
        return json.loads(timing.read_text())["wall_s"]
    return read_results(run)["wall_seconds"]


def record_wall(outcome) -> None:
    if outcome.status == "finished" and outcome.did in ("trained", "resumed", "restarted"):
        (outcome.job.folder / WALL_FILE).write_text(json.dumps({"wall_s": outcome.wall_s}))


def curves(run: Path, heldout: tuple[str, ...], training: str, book: tuple[str, ...] = ()) -> dict[str, Any]:
    """(step, value) of each periodic held-out metric, of the training metric and of the book's figure's metrics
    (`book`: our keys of its panels other than the training metric)."""
    rows = read_metrics(run)
    return {"heldout": {m: points(rows, f"eval/{m}") for m in heldout}, "training": points(rows, training),
            "book": {k: points(rows, k) for k in book}}


def summary(algorithm: str, run: Path, wall: float, result: dict[str, Any],
            family: str = DEFAULT_FAMILY) -> dict[str, Any]:
    """One algorithm's row: per held-out metric the base, final (with its interval) and gain (with its paired
    interval); "learns" when every gain's 95% interval is above zero."""
    heldout, training = book_metrics(family)
    metrics = {}
    for m in heldout:
        gain = result["difference"][m]
        metrics[m] = {"base": result["baseline"][m], "final": result["metrics"][m],
                      "final_interval": [result["intervals"][m]["low"], result["intervals"][m]["high"]],
                      "gain": gain["value"], "gain_interval": [gain["low"], gain["high"]]}
    return {"algorithm": algorithm, "run": str(run), "wall_s": wall, "metrics": metrics,
            "learns": all(v["gain_interval"][0] > 0 for v in metrics.values()),
            "problems": result["data"]["problems"],
            "curves": curves(run, heldout, training, tuple(training_keys(family)[1:])),
            # after - base per problem (evaluations recorded before per-problem values: None), for over_seeds
            "differences": {m: per_problem_gains(result, m) for m in heldout}}


def over_seeds(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One algorithm's per-seed rows as one: per held-out metric the mean base, final and gain, the gain's 95%
    interval over seeds and problems (lab/stats.py gain_over_seeds: every seed is scored on the
    same problems) and every seed's numbers; "learns" when every gain's interval lies above zero; the curves are the
    means over seeds at the steps every seed logged."""
    from rlhf_recipes.tools.document import seed_band
    from lab.stats import gain_over_seeds, seed_interval

    def mean(values):
        return sum(values) / len(values)

    metrics = {}
    for m in rows[0]["metrics"]:
        gain = gain_over_seeds([{"gain": r["metrics"][m]["gain"], "interval": r["metrics"][m]["gain_interval"],
                                 "problems": r["problems"], "differences": (r.get("differences") or {}).get(m)}
                                for r in rows])
        metrics[m] = {"base": mean([r["metrics"][m]["base"] for r in rows]),
                      "final": mean([r["metrics"][m]["final"] for r in rows]), "gain": gain["mean"],
                      "gain_interval": [gain["low"], gain["high"]], "learns": gain["learns"],
                      "gain_std": seed_interval([r["metrics"][m]["gain"] for r in rows])["std"],
                      "interval": gain["method"]}

    def band(per_seed: list[list]) -> dict[str, list]:
        steps, means, low, high = seed_band(dict(enumerate(per_seed)))
        return {"mean": list(zip(steps, means)), "band": list(zip(steps, low, high))}

    heldout = {m: band([r["curves"]["heldout"][m] for r in rows]) for m in metrics}
    training = band([r["curves"]["training"] for r in rows])
    book = {k: band([r["curves"]["book"][k] for r in rows]) for k in rows[0]["curves"].get("book", {})}
    curves = {"heldout": {m: v["mean"] for m, v in heldout.items()}, "training": training["mean"],
              "book": {k: v["mean"] for k, v in book.items()},
              "bands": {"heldout": {m: v["band"] for m, v in heldout.items()}, "training": training["band"]}}
    return {"algorithm": rows[0]["algorithm"], "seeds": len(rows), "wall_s": sum(r["wall_s"] for r in rows),
            "metrics": metrics, "learns": all(v["learns"] for v in metrics.values()),
            "per_seed": [{k: r[k] for k in ("run", "wall_s", "metrics", "learns", "problems")} for r in rows],
            "problems": rows[0]["problems"], "curves": curves}


def _label(metric: str) -> tuple[str, str, bool]:
    return LABELS.get(metric, (metric, metric, False))


def identical_to(rows: list[dict[str, Any]]) -> dict[str, str]:
    """algorithm -> the earlier algorithm whose runs it repeats exactly (every curve and number the same): drawn so
    that both show, and said in the legend (on nano, KTO and APO-zero: docs/nano.md says why)."""
    same: dict[str, str] = {}
    for i, row in enumerate(rows):
        for earlier in rows[:i]:
            if row["curves"] == earlier["curves"] and row["metrics"] == earlier["metrics"]:
                same[row["algorithm"]] = same.get(earlier["algorithm"], earlier["algorithm"])
                break
    return same


def plot(rows: list[dict[str, Any]], path: Path, family: str = DEFAULT_FAMILY) -> None:
    """Top: every algorithm's mean curve on each panel (held-out, then training). Below, with seeds: small multiples
    of each held-out metric, one panel per algorithm with its min-max band over seeds, the others in grey (ten
    bands on one panel cannot be read)."""
    from matplotlib.ticker import MaxNLocator

    plt = pyplot()
    heldout, training = book_metrics(family)
    trained = training_keys(family)  # the training panels: ours, then the book's figure's
    seeds = max((r.get("seeds", 0) for r in rows), default=0)
    banded = [m for m in heldout if any(r["curves"].get("bands", {}).get("heldout", {}).get(m) for r in rows)]
    top = len(heldout) + len(trained)
    fig = plt.figure(figsize=(6.5 * top, 5 + 2.8 * len(banded)), layout="constrained")
    upper, lower = fig.subfigures(2, 1, height_ratios=[5, 2.8 * len(banded)]) if banded else (fig, None)
    axes = list(upper.subplots(1, top))
    small = lower.subplots(len(banded), len(rows), sharey="row", squeeze=False) if banded else []
    same = identical_to(rows)
    smooth = logs_window(r["curves"]["training"] for r in rows)
    colors = {}
    for n, row in enumerate(rows):
        name = row["algorithm"]
        color = colors[same[name]] if name in same else f"C{n % 10}"
        colors[name] = color
        style = ({"ls": (0, (4, 3)), "lw": 2.2, "marker": "x", "markersize": 6} if name in same
                 else {"marker": "o", "markersize": 3})
        label = f"{name} (= {same[name]}: identical runs)" if name in same else name
        for axis, metric in zip(axes, heldout):
            axis.plot(*_heldout_xy(row, metric), color=color, label=label, **style)
        for axis, key in zip(axes[len(heldout):], trained):
            points = row["curves"]["training"] if key == training else row["curves"].get("book", {}).get(key, [])
            axis.plot([p[0] for p in points], running_mean([p[1] for p in points], smooth), color=color, label=label,
                      ls=style["ls"] if name in same else "-", lw=style.get("lw", 1.5))
    book = book_panels(family)
    for axis, metric in zip(axes, (*heldout, *trained)):
        title, ylabel, _ = _label(metric)
        if metric in heldout and seeds:
            title += f"\nmean of {seeds} seeds" + (" (bands: the panels below)" if metric in banded else "")
        if metric in book:  # the book's panel: its wandb name in the title
            title = f"The book's {book[metric]}: our {metric}"
            ylabel = f"{book[metric]} (running mean of 10 logs)" if metric not in LABELS else ylabel
        if metric not in heldout:
            ylabel = ylabel.replace("running mean of 10 logs",
                                    f"running mean of {smooth} logs" if smooth > 1 else "every log")
        axis.set(xlabel="optimizer step", ylabel=ylabel, title=title)
        axis.legend(fontsize=8, ncol=2)
    for r, metric in enumerate(banded, start=1):  # small multiples: one algorithm each, its band, the rest grey
        scale = 100 if _label(metric)[2] else 1
        for c, row in enumerate(rows):
            axis = small[r - 1][c]
            for other in rows:
                if other is not row:
                    axis.plot(*_heldout_xy(other, metric), color="0.8", lw=0.8)
            color = colors[row["algorithm"]]
            axis.plot(*_heldout_xy(row, metric), color=color, marker="o", markersize=2.5)
            band = row["curves"].get("bands", {}).get("heldout", {}).get(metric) or []
            if band:
                axis.fill_between([b[0] for b in band], [scale * b[1] for b in band], [scale * b[2] for b in band],
                                  color=color, alpha=0.25, lw=0)
            axis.set_title(row["algorithm"] + (f" (= {same[row['algorithm']]})" if row["algorithm"] in same else ""),
                           fontsize=9)
            axis.tick_params(labelsize=7)
            if c == 0:
                axis.set_ylabel(f"{metric}{' (%)' if scale == 100 else ''}\nband: min-max, {seeds} seeds", fontsize=8)
            axis.xaxis.set_major_locator(MaxNLocator(nbins=3, integer=True))
            axis.grid(alpha=0.3)
    for axis in axes:
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.grid(alpha=0.3)
    save_figure(fig, path, f"{family} on the nano profile, spell_backward (this project's CPU runs, not the book's)")


def _heldout_xy(row: dict[str, Any], metric: str) -> tuple[list, list]:
    """The steps and values (a rate in %) of a held-out curve, from step 0: the base."""
    points = [(0, row["metrics"][metric]["base"]), *row["curves"]["heldout"][metric]]
    scale = 100 if _label(metric)[2] else 1
    return [p[0] for p in points], [scale * p[1] for p in points]


def _cell(value: float, rate: bool, signed: bool = False) -> str:
    """A rate in % (a signed one, a gain, in points); anything else as is."""
    sign = "+" if signed else ""
    if rate:
        return f"{100 * value:{sign}.1f}" + ("" if signed else "%")
    return f"{value:{sign}.3f}"


def base_line(record: dict[str, Any] | None) -> str:
    """The nano base as its build measured it (evaluation/target.py's record), for the table's caption."""
    if not record:
        return "nano base: no build record (a base built before bases were built to a held-out target)"
    goal, machine, low, high = record["goal"], record["machine"], *record["interval"]
    how = (f"the step closest to {100 * goal['target']:.0f}% inside [{100 * goal['band'][0]:.0f}%, "
           f"{100 * goal['band'][1]:.0f}%]" if goal.get("target") is not None else "its recipe's steps")
    # A base chosen on validation problems scores otherwise on the test problems the table's base column reports:
    # the caption names which problems its number is of, so the two numbers do not read as a contradiction.
    where = (f"{goal['problems']} validation problems (the base column: the test problems)"
             if goal.get("split") == "validation" else f"{goal['problems']} problems")
    return (f"nano base: {100 * record['value']:.1f}% held-out {record['metric']} [{100 * low:.1f}, {100 * high:.1f}] "
            f"on {where}, measured at build: step {record['step']} of "
            f"{record['built_by']['recipe']} ({how}; {machine['processor']}, "
            f"{machine['torch_threads']} torch thread(s))")


def table(rows: list[dict[str, Any]], family: str = DEFAULT_FAMILY, base: dict[str, Any] | None = None):
    """`base`: the nano base's build record (caption); each row's base column is its own baseline evaluation."""
    heldout, _ = book_metrics(family)
    seeds = max((r.get("seeds", 1) for r in rows), default=1)
    over = f"mean of {seeds} training seeds, 95% t interval over seeds and problems" if seeds > 1 else \
        "one training seed, 95% paired bootstrap over problems"
    methods = sorted({v["interval"] for r in rows for v in r["metrics"].values() if v.get("interval")})
    columns = [f"{metric}\n{column}" for metric in heldout for column in ("base", "final", "gain [95%]")]
    out = document.table(f"nano-book: held-out {', '.join(heldout)} of each {family} algorithm vs the nano SFT base "
                         f"(gains in points for rates; {over})", ["algorithm", *columns, "learns", "wall time"],
                         right=[*columns, "learns", "wall time"],
                         caption="\n".join([base_line(base), *(f"gain interval: {m}" for m in methods)]))
    for r in rows:
        cells = []
        for metric in heldout:
            v, rate = r["metrics"][metric], _label(metric)[2]
            low, high = v["gain_interval"]
            interval = "" if low is None else f" [{_cell(low, rate, True)}, {_cell(high, rate, True)}]"
            cells += [_cell(v["base"], rate), _cell(v["final"], rate), f"{_cell(v['gain'], rate, True)}{interval}"]
        out.add_row(r["algorithm"], *cells, "yes" if r["learns"] else "no", f"{r['wall_s'] / 60:.1f} min")
    return out


def run_jobs(todo: list, out: Path, workers: int | None, overwrite: bool, title: str,
             on_finish=lambda outcome: None) -> tuple[int, list]:
    """nano-book's and nano-figures' plan on the lab's executor, the nano base built first."""
    from rlhf_recipes.nano import nano_model_path
    from lab.executor import run_plan

    out.mkdir(parents=True, exist_ok=True)
    return run_plan([todo], workers=workers, title=title, overwrite=overwrite, prepare=nano_model_path,
                    on_finish=on_finish)


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    name, todo = f"nano_book_{args.family}", jobs(args)
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k != "algorithm_list"}
    if args.report:
        missing = [str(job.folder) for job in todo if not job.eval_output.exists()]
        if missing:
            print(f"nano-book --report: no evaluated run in {', '.join(missing)}; run nano-book without --report "
                  "(same --out, --family, --algorithms and --seeds) to train and evaluate them", file=sys.stderr)
            return 2
        recorded = args.out / f"{name}.json"  # the runs were made from the base (and settings) it records
        before = json.loads(recorded.read_text()) if recorded.exists() else {}
        base = (before.get("base") or {}).get("build")
        settings = {**before.get("settings", settings), "report": "redrawn from the run folders by nano-book --report"}
    else:
        from rlhf_recipes.evaluation.target import RECORD
        from rlhf_recipes.nano import nano_model_path

        code, _ = run_jobs(todo, args.out, args.workers, args.overwrite, "nano-book", record_wall)
        if code:
            return code
        # the base's build record (evaluation/target.py, beside the base run_jobs built); none for an older base
        record = Path(nano_model_path()) / RECORD
        base = json.loads(record.read_text(encoding="utf-8")) if record.exists() else None
    rows = []
    for algorithm in args.algorithm_list:
        per_seed = [summary(algorithm, job.folder, wall_seconds(job.folder), json.loads(job.eval_output.read_text()),
                            args.family) for job in todo if job.name.split("/")[0] == algorithm]
        # the per-problem values stay in each run's evaluation, out of the summary
        rows.append(over_seeds(per_seed) if args.seeds else
                    {k: v for k, v in per_seed[0].items() if k != "differences"})
    text = render_text([table(rows, args.family, base)])
    print(text, end="")
    result = {"what": f"{args.family} recipes on the nano profile (this project's CPU runs, not the book's)",
              "base": {"model": "nano", "build": base}, "settings": settings, "algorithms": rows}
    print(wrote(write_result(result, args.out / f"{name}.json", text=text, text_path=args.out / f"{name}_table.txt",
                             draw=lambda path: plot(rows, path, args.family), figure_path=args.out / f"{name}.png")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
