"""The book's policy-gradient figure in miniature: every policy-gradient recipe on the nano profile, side by side.

    rlhf-recipes nano-book                               # all ten, ~2-5 minutes each on one CPU thread
    rlhf-recipes nano-book --algorithms grpo,reinforce --max_steps 200 --out outputs/nano-book-quick

For each algorithm the family runs on nano (the registry's policy-gradient entries), in order:
  1. train `recipes/<algorithm>.yaml --profile nano` in its own process (the normal runner), with periodic
     held-out evaluation (`eval_every` steps, `eval_problems` problems, greedy) logged as eval/exact_match;
  2. `rlhf-recipes evaluate RUN --baseline`: held-out exact match of the run and of the nano SFT base on the same
     problems, the gain with its paired-bootstrap 95% interval (rlhf_recipes/evaluation/).
Then one figure, <out>/nano_book.png: held-out exact match (left) and training correctness reward (right,
the book's correctness_reward, a running mean) against the optimizer step, a line per algorithm; a table of final
exact match, gain [95% interval] and wall time per algorithm (printed, and <out>/nano_book_table.txt), and every
number with the settings that produced it in <out>/nano_book.json. A finished run is reused unless --overwrite.
These are this project's nano runs, never the book's: the book's runs are Qwen3-1.7B on GPUs.
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

EXACT = "exact_match"
REWARD = "rewards/correctness_reward/mean"  # the book's correctness reward, as every policy-gradient run logs it


def nano_algorithms() -> list[str]:
    """The registry's algorithms that learn from their own rollouts (Family.generates_rollouts) and run on nano
    (Family.nano_overlay), in the registry's order; a reward model or a direct-alignment run draws no curve of
    held-out task accuracy."""
    from rlhf_recipes.registry import ALGORITHMS, family_of

    return [name for name, algorithm in ALGORITHMS.items()
            if family_of(algorithm).nano_overlay is not None and family_of(algorithm).generates_rollouts]


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="rlhf-recipes nano-book", description=__doc__, allow_abbrev=False,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algorithms", help="comma-separated subset (default: every policy-gradient algorithm)")
    parser.add_argument("--out", type=Path, default=Path("outputs/nano-book"), help="output folder")
    parser.add_argument("--max_steps", type=int, help="optimizer steps per run (default: the nano profile's)")
    parser.add_argument("--eval_every", type=int, default=50, help="held-out evaluation every N optimizer steps")
    parser.add_argument("--eval_problems", type=int, default=100, help="problems per periodic evaluation")
    parser.add_argument("--num_problems", type=int, default=200, help="problems of the final before/after evaluation")
    parser.add_argument("--overwrite", action="store_true", help="train again even where a run finished")
    args = parser.parse_args(argv)
    available = nano_algorithms()
    args.algorithm_list = [a.strip() for a in args.algorithms.split(",")] if args.algorithms else available
    unknown = [a for a in args.algorithm_list if a not in available]
    if unknown:
        parser.error(f"--algorithms: {', '.join(unknown)} do not run on nano; expected some of {', '.join(available)}")
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


def curves(run: Path) -> dict[str, list[tuple[int, float]]]:
    """(step, value) of the periodic held-out exact match and of the training correctness reward."""
    rows = read_metrics(run / "metrics.jsonl")
    return {"heldout": [(r["step"], r[f"eval/{EXACT}"]) for r in rows if f"eval/{EXACT}" in r],
            "reward": [(r["step"], r[REWARD]) for r in rows if REWARD in r]}


def summary(algorithm: str, run: Path, wall: float, result: dict[str, Any]) -> dict[str, Any]:
    gain = result["difference"][EXACT]
    return {"algorithm": algorithm, "run": str(run), "wall_s": wall,
            "base_exact_match": result["baseline"][EXACT], "exact_match": result["metrics"][EXACT],
            "exact_match_interval": [result["intervals"][EXACT]["low"], result["intervals"][EXACT]["high"]],
            "gain": gain["value"], "gain_interval": [gain["low"], gain["high"]],
            "learns": gain["low"] > 0,  # the gain's 95% interval excludes zero
            "problems": result["data"]["problems"], "curves": curves(run)}


def running_mean(points: list[tuple[int, float]], window: int) -> tuple[list[int], list[float]]:
    steps, values = [p[0] for p in points], [p[1] for p in points]
    means = [sum(values[max(0, i - window + 1):i + 1]) / len(values[max(0, i - window + 1):i + 1])
             for i in range(len(values))]
    return steps, means


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, (heldout, reward) = plt.subplots(1, 2, figsize=(13, 5))
    for row in rows:
        points = [(0, row["base_exact_match"]), *row["curves"]["heldout"]]  # step 0: the nano SFT base
        line, = heldout.plot([p[0] for p in points], [100 * p[1] for p in points], marker="o", markersize=3,
                             label=row["algorithm"])
        steps, means = running_mean(row["curves"]["reward"], window=10)
        reward.plot(steps, means, color=line.get_color(), label=row["algorithm"])
    heldout.set(xlabel="optimizer step", ylabel="held-out exact match (% of problems, greedy)",
                title="Held-out spell_backward accuracy")
    reward.set(xlabel="optimizer step", ylabel="correctness reward (0-1, running mean of 10 logs)",
               title="Training reward (the book's correctness_reward)")
    for axis in (heldout, reward):
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8, ncol=2)
    fig.suptitle("Policy gradients on the nano profile (this project's CPU runs, not the book's)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def table(rows: list[dict[str, Any]]):
    from rich.table import Table

    out = Table(title="nano-book: held-out exact match of each algorithm vs the nano SFT base")
    for column in ("algorithm", "base", "final", "gain [95% interval]", "learns", "wall time"):
        out.add_column(column, justify="left" if column == "algorithm" else "right")
    for r in rows:
        low, high = r["gain_interval"]
        out.add_row(r["algorithm"], f"{100 * r['base_exact_match']:.1f}%", f"{100 * r['exact_match']:.1f}%",
                    f"{100 * r['gain']:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}] pts",
                    "yes" if r["learns"] else "no", f"{r['wall_s'] / 60:.1f} min")
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
            rows.append(summary(algorithm, run, wall, evaluate(run, args)))
        except RuntimeError as e:  # a run that failed: say which and where its log is; the others stay reusable
            print(f"error: {e}", file=sys.stderr)
            return 1
    plot(rows, args.out / "nano_book.png")
    console = Console(record=True)
    console.print(table(rows))
    (args.out / "nano_book_table.txt").write_text(console.export_text(), encoding="utf-8")
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k != "algorithm_list"}
    (args.out / "nano_book.json").write_text(json.dumps(json_safe({
        "what": "policy-gradient recipes on the nano profile (this project's CPU runs, not the book's)",
        "base": base, "settings": settings, "algorithms": rows}), indent=2), encoding="utf-8")
    print(f"wrote {args.out / 'nano_book.png'}, {args.out / 'nano_book.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
