"""`rlhf-recipes overoptimization`: reward over-optimization measured, gold against proxy against KL.

    rlhf-recipes overoptimization --profile tiny --out outputs/overoptimization-tiny   # the plumbing, ~1 minute
    rlhf-recipes overoptimization --profile nano --workers 2                          # the experiment, ~1 hour

Gao, Schulman & Hilton (2022) optimize a learned proxy reward and watch a "gold" reward: the gold score peaks and
falls while the proxy keeps rising. On nano the gold scorer is real, the task's own score_answer, and the proxies
are the project's reward-model recipes. The command, on the sweep's executor (every piece a normal recipe run;
plan.py says which):
  1. trains the proxies, and the direct-alignment runs (DPO / IPO across beta), W at a time;
  2. trains GRPO against each proxy (`reward_funcs: [rm:<proxy>]`), checkpointing along the way;
  3. measures, W processes at a time (measure.py): the base's samples on held-out problems scored by gold and by
     every proxy (best-of-n for n = 1, 2, 4, ..., and each proxy's pairwise accuracy), and every checkpoint's
     samples: gold, its proxy, and KL from the base;
  4. writes <out>/overoptimization.json (rows, fits, turns; paths relative to <out>), overoptimization.png and
     overoptimization.txt (the tables, also printed).
The same command again reuses every finished run and every measurement; an interrupted run resumes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from lab.overoptimization.plan import (
    PROFILES, Profile, Proxy, direct_folder, direct_name, phases, proxy_folder, rl_folder,
)

RESULT = "overoptimization"
KL_ESTIMATOR = ("sampled: per held-out problem, completions sampled from the policy as the RL recipe samples; per "
                "completion the sum over its tokens of the exact next-token KL(pi || pi_base), both at the sampling "
                "temperature without the top-k / top-p cut (finite), averaged over completions and problems; "
                "`kl_logratio` is the mean of sum log pi/pi_base at the sampled tokens (same distributions)")


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="rlhf-recipes overoptimization", description=__doc__, allow_abbrev=False,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="nano", choices=sorted(PROFILES),
                        help="nano: the experiment (~1 hour on a shared 2-core machine); tiny: the plumbing (~1 min)")
    parser.add_argument("--out", type=Path, help="output folder (default outputs/overoptimization[-tiny])")
    parser.add_argument("--workers", type=int, help="runs (and measurements) at once (default: one per core)")
    args = parser.parse_args(argv)
    if args.workers is not None and args.workers < 1:
        parser.error(f"--workers must be >= 1, got {args.workers}")
    args.out = args.out or Path("outputs/overoptimization" + ("" if args.profile == "nano" else f"-{args.profile}"))
    return args


def _worker(threads: int) -> None:
    """A measurement process: its share of the cores, and no progress bars (W processes would interleave them)."""
    os.environ["TQDM_DISABLE"] = "1"
    import torch
    from transformers.utils import logging as hf_logging

    from rlhf_recipes.quiet import quiet_known_noise

    torch.set_num_threads(threads)
    hf_logging.disable_progress_bar()
    quiet_known_noise()


def train(profile: Profile, out: Path, workers: int) -> tuple[int, list]:
    """Both phases on the lab's executor, the base built first: (exit code, the outcomes)."""
    from rlhf_recipes.models import resolve_model_path
    from lab.executor import run_plan

    walls_file = out / "walls.json"
    walls = json.loads(walls_file.read_text()) if walls_file.exists() else {}

    def record(outcome) -> None:
        if outcome.status == "finished" and outcome.did != "nothing":
            walls[outcome.job.name] = outcome.wall_s
            walls_file.write_text(json.dumps(walls, indent=1))

    return run_plan(phases(profile, out, workers), workers=workers, title="overoptimization",
                    prepare=lambda: resolve_model_path(profile.name), on_finish=record)


def curves(profile: Profile, out: Path) -> list[tuple[str, str, Path, Proxy | None, dict[str, Any]]]:
    """Every RL and direct-alignment run: (its section of the document, its name, its folder, the proxy it trained
    against (None: none), the labels of its rows)."""
    rl = [("rl", p.name, rl_folder(out, p), p, {"proxy_name": p.name, "run": os.path.relpath(rl_folder(out, p), out)})
          for p in profile.proxies]
    return rl + [("direct_alignment", direct_name(a, b), direct_folder(out, a, b), None,
                  {"run": direct_name(a, b), "algorithm": a, "beta": b,
                   "folder": os.path.relpath(direct_folder(out, a, b), out)})
                 for a, betas in profile.direct for b in betas]


def measure(profile: Profile, out: Path, base: str, workers: int, finished: set[Path]) -> tuple[dict, dict]:
    """(the base's samples, {run folder: its measurement}), W measurements at a time in their own processes."""
    import multiprocessing

    from lab.overoptimization.measure import measure_base, measure_run

    proxies = {p.name: str(proxy_folder(out, p)) for p in profile.proxies if proxy_folder(out, p) in finished}
    common = {"profile": profile.name, "base": base, "problems": profile.problems, "seed": profile.seed}
    threads = max(1, (os.cpu_count() or 1) // workers)
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"), initializer=_worker,
                             initargs=(threads,)) as pool:
        base_future = pool.submit(measure_base, out / "measurements" / "base.json", proxies=proxies,
                                  samples=profile.best_of_n_samples, **common)
        futures = {run: pool.submit(measure_run, out / "measurements" / f"{run.parent.name}-{run.name}.json", run,
                                    proxy_path=proxy and str(proxy_folder(out, proxy)), samples=profile.samples,
                                    **common) for _, _, run, proxy, _ in curves(profile, out) if run in finished}
        return base_future.result(), {run: f.result() for run, f in futures.items()}


def document(profile: Profile, out: Path, base: dict, measured: dict[Path, dict], wall_s: float) -> dict[str, Any]:
    from lab.overoptimization.rows import best_of_n_rows, fits, proxy_accuracy, trajectory_rows, turn

    walls = json.loads((out / "walls.json").read_text()) if (out / "walls.json").exists() else {}
    proxies = [p for p in profile.proxies if p.name in base["proxy"]]
    doc: dict[str, Any] = {
        "what": f"reward over-optimization on the {profile.name} profile: the gold score (the task's score_answer) "
                "against learned proxies against KL from the base (this project's CPU runs)",
        "profile": profile.name, "wall_s": wall_s, "run_wall_s": walls, "heldout": base["problems"],
        "kl_estimator": KL_ESTIMATOR, "kl_best_of_n": "analytic, log n - (n-1)/n (Gao et al. 2022)",
        "sampling": base["sampling"], "intervals": "95% Student-t over held-out problems",
        "settings": {"rl_algorithm": profile.rl_algorithm, "rl_overrides": list(profile.rl),
                     "direct": [[a, list(b)] for a, b in profile.direct],
                     "direct_overrides": list(profile.direct_overrides), "problems": profile.problems,
                     "best_of_n_samples": profile.best_of_n_samples, "samples_per_checkpoint": profile.samples,
                     "seed": profile.seed},
        "proxies": [{"name": p.name, "label": p.label, "recipe": f"recipes/{p.algorithm}.yaml",
                     "overrides": list(p.overrides), "run": os.path.relpath(proxy_folder(out, p), out),
                     "pairwise_accuracy": proxy_accuracy(base, p.name)} for p in proxies],
        "best_of_n": [row for p in proxies for row in best_of_n_rows(base, p.name, profile.ns)],
        "rl": [], "direct_alignment": [], "turns": {"rl": {}, "direct_alignment": {}},
    }
    for section, name, run, proxy, labels in curves(profile, out):
        if run in measured and (proxy is None or proxy in proxies):
            rows = trajectory_rows(base, measured[run], proxy and proxy.name, **labels)
            doc[section] += rows
            doc["turns"][section][name] = turn(base, measured[run], rows)
    doc["fits"] = {"best_of_n": fits(doc["best_of_n"], "proxy_name", "best_of_n"),
                   "rl": fits(doc["rl"], "proxy_name", "rl"),
                   "direct_alignment": fits(doc["direct_alignment"], "run", "rl")}
    return doc


def main(argv: list[str] | None = None) -> int:
    from rlhf_recipes.models import resolve_model_path
    from rlhf_recipes.run_folder import run_finished
    from rlhf_recipes.tools.document import render_text, write_result, wrote
    from lab.executor import default_workers
    from lab.overoptimization.report import plot, tables

    args = parse(sys.argv[1:] if argv is None else argv)
    begin = time.perf_counter()
    profile = PROFILES[args.profile]
    workers = args.workers or default_workers(len([job for phase in phases(profile, args.out, 1) for job in phase]))
    args.out.mkdir(parents=True, exist_ok=True)
    code, outcomes = train(profile, args.out, workers)
    if code not in (0, 1):  # bad input or interrupted; failed runs: the report goes on with what finished
        return code
    base = resolve_model_path(profile.name)  # built before the runs by train()
    failed = [o for o in outcomes if o.status != "finished"]
    finished = {o.job.folder for o in outcomes if o.status == "finished" and run_finished(o.job.folder)}
    base_samples, measured = measure(profile, args.out, base, workers, finished)
    doc = document(profile, args.out, base_samples, measured, time.perf_counter() - begin)
    doc["failed"] = [{"run": o.job.name, "log": os.path.relpath(o.job.log, args.out)} for o in failed]
    text = render_text([*tables(doc), f"wall time {doc['wall_s'] / 60:.1f} min ({workers} workers)"], width=170)
    print(text, end="")
    print(wrote(write_result(doc, args.out / f"{RESULT}.json", text=text, text_path=args.out / f"{RESULT}.txt",
                             draw=lambda path: plot(doc, path), figure_path=args.out / f"{RESULT}.png")))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
