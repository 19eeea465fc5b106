"""`rlhf-recipes sweep`: a controlled experiment, a grid of settings x seeds, each cell x seed one normal run.

    rlhf-recipes sweep recipes/grpo.yaml --profile nano --grid learning_rate=1e-5,2e-5,4e-5 --seeds 3 --workers 2
    rlhf-recipes sweep recipes/dpo.yaml --profile tiny --grid beta=0.05,0.1 --seeds 2 --max_steps 20
    rlhf-recipes sweep sweep.yaml                      # a wandb grid sweep file (+ `recipe:`), docs/sweeps.md
    rlhf-recipes sweep outputs/sweeps/grpo-nano --report   # redraw the report of a (partly) finished sweep
    rlhf-recipes sweep recipes/grpo.yaml --grid learning_rate=1e-6,3e-6 --seeds 5 --slurm --slurm_option=--gres=gpu:1
        --slurm_array_parallelism 4

Runs land in DIR/<key=value,...>/seed-<s>/ (each with its config.yaml, metrics.jsonl, final_results.json and, with
--evaluate, eval/sweep.json from `rlhf-recipes evaluate RUN --baseline`); their logs beside them (seed-<s>.log).
Any other --KEY VALUE is a recipe override for every run (checked like the runner checks it). The same command
again runs only what has not finished: interrupted runs resume from their checkpoint, finished ones are never
re-run, added values or seeds add runs. DIR/sweep.json, sweep.txt and sweep.png are rewritten as runs finish:
per cell the mean, seed std and 95% interval of every metric (over seeds and problems for held-out ones, over
seeds for training values); per pair of cells the difference in the key metric with its interval; ranked by the
task's held-out exact match unless --metric says otherwise (docs/sweeps.md says how little 2-3 seeds tell).
Exit code: 0 every run finished, 1 some failed (listed with their logs), 130 interrupted, 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lab.sweep import spec as sweep_spec
from lab.sweep import state
from lab.sweep.spec import SweepSpec
from rlhf_recipes.config import RecipeError, _suggest, read_yaml
from rlhf_recipes.run_folder import has_config
from rlhf_recipes.tools.tool_flags import refuse_misspelt_tool_flags

DEFAULT_ROOT = Path("outputs/sweeps")


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlhf-recipes sweep", description=__doc__, allow_abbrev=False,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("target", help="a recipe, a sweep file (wandb's grid format), or a sweep folder")
    parser.add_argument("--profile", choices=("tiny", "nano"), help="run every cell on this profile")
    parser.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2",
                        help="a swept recipe key and its values (repeat for more keys: every combination runs)")
    parser.add_argument("--seeds", type=int, help="training seeds per cell (default 1): seeds FIRST..FIRST+N-1")
    parser.add_argument("--first_seed", type=int, default=0, help="the first seed (default 0)")
    parser.add_argument("--workers", type=int, help="runs at once (default: one per core, or one per GPU)")
    parser.add_argument("--out", type=Path, help="the sweep's folder (default outputs/sweeps/<recipe>[-<profile>]); "
                        "with --report on a sweep folder: where the report is written")
    parser.add_argument("--evaluate", action=argparse.BooleanOptionalAction, default=None,
                        help="run `rlhf-recipes evaluate RUN --baseline` on each finished run (default: where the "
                        "family has a held-out evaluation)")
    parser.add_argument("--metric", help="the metric the report ranks (default: the gain in held-out exact match, "
                        "else the first held-out metric's gain, else a key training metric)")
    parser.add_argument("--report", action="store_true", help="only (re)write the report of the sweep in TARGET")
    parser.add_argument("--overwrite", action="store_true", help="train every run of this command again")
    parser.add_argument("--launcher", help="how each run starts, e.g. 'accelerate launch --config_file "
                        "accelerate_configs/4gpu.yaml' (default: python)")
    parser.add_argument("--slurm", action="store_true", help="submit the sweep as one SLURM job array (submitit; a "
                        "task per run, requeued with a checkpoint when preempted or out of time)")
    parser.add_argument("--slurm_option", action="append", default=[], metavar="OPTION",
                        help="an sbatch option for every task, e.g. --slurm_option=--gres=gpu:1 (repeatable)")
    parser.add_argument("--slurm_array_parallelism", type=int, metavar="N",
                        help="with --slurm: at most N tasks of the array at once (default: submitit's, 256)")
    return parser


def read_spec(args: argparse.Namespace, overrides: list[str]) -> tuple[SweepSpec, Path]:
    """The sweep this command asks for, and its folder."""
    target = Path(args.target)
    if args.report and not target.exists():  # --report reads a sweep's folder: not "no such recipe file"
        siblings = [p.name for p in target.parent.iterdir() if p.is_dir()] if target.parent.is_dir() else []
        raise RecipeError(f"{target}: no such sweep folder.{_suggest(target.name, siblings)} --report redraws the "
                          f"report of a sweep's folder (default {DEFAULT_ROOT}/<recipe>[-<profile>])")
    if target.is_dir():
        spec = state.load(target)
        if spec is None:
            raise RecipeError(f"{target}: not a sweep folder (no {state.SPEC_FILE}); give a recipe or a sweep file")
        if args.grid or overrides or args.seeds:
            raise RecipeError(f"{target}: a sweep folder runs as recorded; to widen it, run the recipe again with "
                              f"--out {target} and the new --grid values or --seeds")
        if args.out is not None and not args.report:
            raise RecipeError(f"--out {args.out}: a sweep folder runs in place ({target}); drop --out (with "
                              "--report, --out is where the report is written)")
        return spec, target
    data = read_yaml(str(target))
    if "algorithm" in data:  # a recipe
        spec = SweepSpec(recipe=str(target), profile=args.profile, grid=sweep_spec.parse_grid(args.grid),
                         seeds=sweep_spec.parse_seeds(args.seeds, args.first_seed), overrides=overrides,
                         metric=args.metric)
    else:
        spec = sweep_spec.from_file(str(target))
        if args.grid:
            raise RecipeError(f"{target}: a sweep file sets its grid in `parameters`; drop --grid")
        spec.profile = args.profile or spec.profile
        spec.overrides += overrides
        spec.metric = args.metric or spec.metric
        if args.seeds is not None:
            spec.seeds = sweep_spec.parse_seeds(args.seeds, args.first_seed)
    name = Path(spec.recipe).stem + (f"-{spec.profile}" if spec.profile else "")
    return spec, args.out or DEFAULT_ROOT / name


def wants_evaluation(spec: SweepSpec, asked: bool | None) -> bool:
    """--evaluate / --no-evaluate, else whether the recipe's family has a held-out evaluation for it."""
    if asked is not None:
        return asked
    from rlhf_recipes.evaluation import EvalOptions
    from rlhf_recipes.registry import family_of

    recipe = spec.recipe_of()
    return family_of(recipe.algorithm).evaluator(recipe, EvalOptions()) is not None


def main(argv: list[str] | None = None) -> int:
    args, overrides = make_parser().parse_known_args(sys.argv[1:] if argv is None else argv)
    from lab.executor import Job, check_settings, run_plan
    from lab.sweep import report

    try:
        spec, sweep_dir = read_spec(args, overrides)
        if args.report:
            recorded = state.load(sweep_dir) or spec
            recorded.metric = args.metric or recorded.metric  # --report --metric M: rank this report by M
            if not any(has_config(sweep_dir / run.relpath) for run in recorded.runs()):
                # a report kept without its runs (reference_runs/sweeps/*): redrawn, every cell would be empty
                raise RecipeError(f"{sweep_dir}: none of the sweep's {len(recorded.runs())} runs is in this folder "
                                  "(no <cell>/seed-<s>/config.yaml), so its report is left as it is; --report redraws "
                                  "a sweep from its run folders")
            if args.metric:
                report.check_metric_logged(recorded, sweep_dir)  # a name no run logged: say so, write nothing
            # a sweep folder's report into --out (the runs are read where they are), else into the folder
            into = args.out or sweep_dir  # a recipe's --out is its sweep_dir already (read_spec)
            print(report.write(recorded, sweep_dir, into), end="")
            print(report.wrote(into))
            return 0
        try:
            sweep_spec.check(spec)
        except RecipeError:
            recipe_argv = [spec.recipe, *(["--profile", spec.profile] if spec.profile else [])]
            refuse_misspelt_tool_flags(make_parser(), overrides, recipe_argv)
            raise
        if args.workers is not None and args.workers < 1:
            raise RecipeError(f"--workers: expected a number of runs at once >= 1, got {args.workers}")
        evaluate = ("--batch_size", "50") if wants_evaluation(spec, args.evaluate) else None
        jobs = [Job(str(run.relpath), sweep_dir / run.relpath, tuple(spec.train_args(run)), evaluate)
                for run in spec.runs()]
        with state.SweepLock(sweep_dir):
            whole = state.merged(spec, sweep_dir, args.overwrite)
            if args.slurm:
                from lab.sweep.slurm import slurm_parameters, submit

                # a bad option is named before anything is written
                params = slurm_parameters(args.slurm_option, f"sweep-{sweep_dir.name}", args.slurm_array_parallelism)
                for job in [] if args.overwrite else jobs:
                    check_settings(job)
                state.save(whole, sweep_dir)
                return submit(sweep_dir, jobs, args.launcher, params)
            # the widened sweep is recorded once the kept runs are known to be the ones asked (run_plan checks)
            code, _ = run_plan([jobs], workers=args.workers, title=f"sweep {sweep_dir}", overwrite=args.overwrite,
                               launcher=args.launcher, prepare=lambda: state.save(whole, sweep_dir),
                               on_finish=lambda outcome: report.write(whole, sweep_dir))
            if code == 2:
                return code
            text = report.write(whole, sweep_dir)
    except RecipeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(text, end="")
    print(report.wrote(sweep_dir))
    return code


if __name__ == "__main__":
    sys.exit(main())
