"""How much a sweep's workers buy: the same sweep with --workers 1 and --workers W, in turn, wall time each.

    python -m benchmarks.sweep_workers                          # 2 x 2 tiny DPO (beta x seeds), evaluated; workers 1 vs 2
    python -m benchmarks.sweep_workers --repeats 3 --workers 2 --recipe recipes/grpo.yaml --grid learning_rate=1e-6,2e-6

Each repeat runs both settings into fresh folders (alternating, so a drift in the machine's speed hits both),
then prints every wall time, the medians and the speed-up (median of the per-repeat ratios). With one worker each
run gets every core's thread; with W workers, cores / W each (the executor's split).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rlhf_recipes.paths import recipe_path


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sweep_workers", description=__doc__, allow_abbrev=False,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", default=str(recipe_path("dpo")), help="the recipe swept (default recipes/dpo.yaml)")
    parser.add_argument("--profile", default="tiny")
    parser.add_argument("--grid", default="beta=0.05,0.5", help="one --grid KEY=V1,V2 (default beta=0.05,0.5)")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2, help="compared against --workers 1")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-evaluate", dest="evaluate", action="store_false", help="training only")
    args = parser.parse_args(argv)
    for flag in ("seeds", "workers", "repeats"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag} must be >= 1")
    return args


def one_sweep(args: argparse.Namespace, workers: int, out: Path) -> float:
    command = [sys.executable, "-m", "rlhf_recipes.tools.cli", "sweep", args.recipe, "--profile", args.profile,
               "--grid", args.grid, "--seeds", str(args.seeds), "--workers", str(workers), "--out", str(out),
               "--evaluate" if args.evaluate else "--no-evaluate"]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"error: `{' '.join(command)}` exited {done.returncode}:\n{done.stderr[-2000:]}")
    return wall


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    walls: dict[int, list[float]] = {1: [], args.workers: []}
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as tmp:
        for repeat in range(args.repeats):
            for workers in (1, args.workers):
                wall = one_sweep(args, workers, Path(tmp) / f"r{repeat}-w{workers}")
                walls[workers].append(wall)
                print(f"repeat {repeat + 1}: --workers {workers}: {wall:.1f} s", flush=True)
    ratios = [a / b for a, b in zip(walls[1], walls[args.workers])]
    print(f"{Path(args.recipe).name} --profile {args.profile} --grid {args.grid} --seeds {args.seeds}"
          f"{'' if args.evaluate else ' --no-evaluate'}: median wall --workers 1 {statistics.median(walls[1]):.1f} s, "
          f"--workers {args.workers} {statistics.median(walls[args.workers]):.1f} s; speed-up "
          f"{statistics.median(ratios):.2f}x (per repeat: {', '.join(f'{r:.2f}' for r in ratios)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
