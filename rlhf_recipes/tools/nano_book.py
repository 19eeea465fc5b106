"""The book's figures in miniature: every recipe of a family on the nano profile, side by side.

    rlhf-recipes nano-book                               # the ten policy gradients, ~2-5 minutes each on one thread
    rlhf-recipes nano-book --family direct_alignment     # DPO and its eight relatives, ~2-3 minutes each
    rlhf-recipes nano-book --algorithms grpo,reinforce --max_steps 200 --out outputs/nano-book-quick

For each algorithm of the family (`--family`, one that runs on nano: the registry's entries of that family), in order:
  1. train `recipes/<algorithm>.yaml --profile nano` in its own process (the normal runner), with periodic
     held-out evaluation (`eval_every` steps, `eval_problems` problems, greedy) logged as eval/<metric>;
  2. `rlhf-recipes evaluate RUN --baseline`: the family's held-out metrics of the run and of the nano SFT base on
     the same problems, each gain with its paired-bootstrap 95% interval (rlhf_recipes/evaluation/).
The family says which metrics (Family.nano_book_heldout, nano_book_training): policy gradients, held-out exact
match and the book's training correctness reward; direct alignment, held-out preference accuracy (implicit
reward), held-out exact match and the training pairs' preference accuracy. Then one figure,
<out>/nano_book_<family>.png: a panel per held-out metric and one for the training metric (a running mean)
against the optimizer step, a line per algorithm; a table of base, final, gain [95% interval] per held-out metric
and wall time per algorithm (printed, and <out>/nano_book_<family>_table.txt), and every number with the settings
that produced it in <out>/nano_book_<family>.json. A finished run is reused unless --overwrite.
These are this project's nano runs, never the book's: the book's runs are 1-2B models on GPUs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rlhf_recipes.paths import recipe_path
from rlhf_recipes.report import read_metrics, run_finished
from rlhf_recipes.json_safe import json_safe

DEFAULT_FAMILY = "policy_gradient"  # the book's headline figure (chapter 6)
# Panel title, axis label and whether it is a rate (drawn in %) of the metrics the families name
# (Family.nano_book_heldout / nano_book_training); another metric is drawn under its own name.
LABELS = {
    "exact_match": ("Held-out spell_backward accuracy (step 0: the nano base)",
                    "held-out exact match (% of problems, greedy)", True),
    "implicit_accuracy": ("Held-out preference accuracy (step 0: the nano base)",
                          "implicit reward ranks chosen first (% of held-out pairs)", True),
    "rewards/correctness_reward/mean": ("Training reward (the book's correctness_reward)",
                                        "correctness reward (0-1, running mean of 10 logs)", False),
    "rewards/accuracies": ("Training preference accuracy (TRL's rewards/accuracies)",
                           "pairs ranked right (0-1, running mean of 10 logs)", False),
}


def nano_families() -> list[str]:
    """The families with a nano overlay and nano-book metrics, in the registry's order."""
    from rlhf_recipes.registry import FAMILIES, family_named

    return [f for f in FAMILIES if family_named(f).nano_overlay is not None and family_named(f).nano_book_heldout]


def nano_algorithms(family: str = DEFAULT_FAMILY) -> list[str]:
    """The registry's algorithms of `family` (which runs on nano), in the registry's order."""
    from rlhf_recipes.registry import ALGORITHMS

    return [name for name, algorithm in ALGORITHMS.items() if algorithm.family == family]


def book_metrics(family: str) -> tuple[tuple[str, ...], str]:
    """(held-out metrics, training metric) of the family's figure and table."""
    from rlhf_recipes.registry import family_named

    fam = family_named(family)
    return fam.nano_book_heldout, fam.nano_book_training


def stem(family: str) -> str:
    return f"nano_book_{family}"


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
    parser.add_argument("--overwrite", action="store_true", help="train again even where a run finished")
    args = parser.parse_args(argv)
    families = nano_families()
    if args.family not in families:
        parser.error(f"--family: {args.family} does not run on nano; expected one of {', '.join(families)}")
    available = nano_algorithms(args.family)
    args.algorithm_list = [a.strip() for a in args.algorithms.split(",")] if args.algorithms else available
    unknown = [a for a in args.algorithm_list if a not in available]
    if unknown:
        parser.error(f"--algorithms: {', '.join(unknown)} are not {args.family} algorithms that run on nano; "
                     f"expected some of {', '.join(available)}")
    for flag in ("max_steps", "eval_every", "eval_problems", "num_problems"):
        value = getattr(args, flag)
        if value is not None and value <= 0:
            parser.error(f"--{flag} must be > 0, got {value}")
    return args


def train(algorithm: str, run: Path, args: argparse.Namespace) -> float:
    """One run in its own process; returns its wall seconds (the recorded ones when the run is reused)."""
    timing = run / "nano_book_wall_s.json"
    if run_finished(run) and timing.exists() and not args.overwrite:
        return json.loads(timing.read_text())["wall_s"]
    command = [sys.executable, "-m", "rlhf_recipes.train", str(recipe_path(algorithm)), "--profile", "nano",
               "--output_dir", str(run), "--eval_every", str(args.eval_every),
               "--eval_problems", str(args.eval_problems), "--overwrite"]
    if args.max_steps:
        command += ["--max_steps", str(args.max_steps)]
    run.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with open(run / "nano_book_train.log", "w", encoding="utf-8") as log:
        done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT,
                              env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")})
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{algorithm}: `{' '.join(command)}` exited {done.returncode}; "
                           f"see {run}/nano_book_train.log")
    timing.write_text(json.dumps({"wall_s": wall, "command": command}))
    return wall


def evaluate(run: Path, args: argparse.Namespace) -> dict[str, Any]:
    """`rlhf-recipes evaluate RUN --baseline` (in this process); its JSON result."""
    from rlhf_recipes.tools.evaluate import main as evaluate_main

    output = run / "eval" / "nano_book.json"
    if not output.exists() or args.overwrite:
        code = evaluate_main([str(run), "--baseline", "--num_problems", str(args.num_problems), "--batch_size", "50",
                              "--output", str(output)])
        if code != 0:
            raise RuntimeError(f"rlhf-recipes evaluate {run} --baseline exited {code}")
    return json.loads(output.read_text())


def curves(run: Path, heldout: tuple[str, ...], training: str) -> dict[str, Any]:
    """(step, value) of each periodic held-out metric and of the training metric."""
    rows = read_metrics(run / "metrics.jsonl")
    return {"heldout": {m: [(r["step"], r[f"eval/{m}"]) for r in rows if f"eval/{m}" in r] for m in heldout},
            "training": [(r["step"], r[training]) for r in rows if training in r]}


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
            "problems": result["data"]["problems"], "curves": curves(run, heldout, training)}


def running_mean(points: list[tuple[int, float]], window: int) -> tuple[list[int], list[float]]:
    steps, values = [p[0] for p in points], [p[1] for p in points]
    means = [sum(values[max(0, i - window + 1):i + 1]) / len(values[max(0, i - window + 1):i + 1])
             for i in range(len(values))]
    return steps, means


def _label(metric: str) -> tuple[str, str, bool]:
    return LABELS.get(metric, (metric, metric, False))


def plot(rows: list[dict[str, Any]], path: Path, family: str = DEFAULT_FAMILY) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    heldout, training = book_metrics(family)
    fig, axes = plt.subplots(1, len(heldout) + 1, figsize=(6.5 * (len(heldout) + 1), 5))
    for row in rows:
        color = None
        for axis, metric in zip(axes, heldout):
            scale = 100 if _label(metric)[2] else 1
            points = [(0, row["metrics"][metric]["base"]), *row["curves"]["heldout"][metric]]  # step 0: the base
            line, = axis.plot([p[0] for p in points], [scale * p[1] for p in points], marker="o", markersize=3,
                              color=color, label=row["algorithm"])
            color = line.get_color()
        steps, means = running_mean(row["curves"]["training"], window=10)
        axes[-1].plot(steps, means, color=color, label=row["algorithm"])
    for axis, metric in zip(axes, (*heldout, training)):
        axis.set(xlabel="optimizer step", ylabel=_label(metric)[1], title=_label(metric)[0])
    for axis in axes:
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8, ncol=2)
    fig.suptitle(f"{family} on the nano profile, spell_backward (this project's CPU runs, not the book's)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _cell(value: float, rate: bool, signed: bool = False) -> str:
    """A rate in % (a signed one, a gain, in points); anything else as is."""
    sign = "+" if signed else ""
    if rate:
        return f"{100 * value:{sign}.1f}" + ("" if signed else "%")
    return f"{value:{sign}.3f}"


def table(rows: list[dict[str, Any]], family: str = DEFAULT_FAMILY):
    from rich.table import Table

    heldout, _ = book_metrics(family)
    out = Table(title=f"nano-book: held-out {', '.join(heldout)} of each {family} algorithm vs the nano SFT base "
                      "(gains in points for rates)")
    out.add_column("algorithm")
    for metric in heldout:
        for column in ("base", "final", "gain [95%]"):
            out.add_column(f"{metric}\n{column}", justify="right")
    out.add_column("learns", justify="right")
    out.add_column("wall time", justify="right")
    for r in rows:
        cells = []
        for metric in heldout:
            v, rate = r["metrics"][metric], _label(metric)[2]
            low, high = v["gain_interval"]
            cells += [_cell(v["base"], rate), _cell(v["final"], rate), f"{_cell(v['gain'], rate, True)} "
                      f"[{_cell(low, rate, True)}, {_cell(high, rate, True)}]"]
        out.add_row(r["algorithm"], *cells, "yes" if r["learns"] else "no", f"{r['wall_s'] / 60:.1f} min")
    return out


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console
    from tqdm import tqdm

    args = parse(sys.argv[1:] if argv is None else argv)
    args.out.mkdir(parents=True, exist_ok=True)
    from rlhf_recipes.nano import nano_model_path

    base = nano_model_path()  # built once, before the runs (each would otherwise wait on the build's lock)
    rows = []
    for algorithm in tqdm(args.algorithm_list, desc="nano-book", unit="algorithm"):
        run = args.out / algorithm
        try:
            wall = train(algorithm, run, args)
            rows.append(summary(algorithm, run, wall, evaluate(run, args), args.family))
        except RuntimeError as e:  # a run that failed: say which and where its log is; the others stay reusable
            print(f"error: {e}", file=sys.stderr)
            return 1
    name = stem(args.family)
    plot(rows, args.out / f"{name}.png", args.family)
    console = Console(record=True, width=160)
    console.print(table(rows, args.family))
    (args.out / f"{name}_table.txt").write_text(console.export_text(), encoding="utf-8")
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k != "algorithm_list"}
    (args.out / f"{name}.json").write_text(json.dumps(json_safe({
        "what": f"{args.family} recipes on the nano profile (this project's CPU runs, not the book's)",
        "base": base, "settings": settings, "algorithms": rows}), indent=2), encoding="utf-8")
    print(f"wrote {args.out / f'{name}.png'}, {args.out / f'{name}.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
