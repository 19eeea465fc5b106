"""A sweep's report, read from its run folders alone (so `--report` redraws it at any time, from any machine):
sweep.json (every run's numbers, each cell's seed statistics, each pair of cells' paired difference in the key
metric), sweep.txt (the same as tables, also printed) and sweep.png (plot.py); docs/sweeps.md, "What a sweep
writes", has each in full. Metric names: `heldout/<m>` (the evaluated model), `gain/<m>` (minus the baseline, same
problems), `final/<m>` (the run's last logged training value).
"""

from __future__ import annotations

import json
import math
from itertools import combinations
from pathlib import Path
from typing import Any

from lab import stats
from lab.book_figures import NANO_BOOK
from lab.sweep.spec import Run, SweepSpec
from rlhf_recipes.run_folder import has_config, read_results
from rlhf_recipes.tools.document import render_text, table, write_result
from rlhf_recipes.tools.document import wrote as document_wrote

STEM = "sweep"


def run_record(sweep_dir: Path, run: Run) -> dict[str, Any]:
    """One run's status and metrics, from its folder."""
    folder = sweep_dir / run.relpath
    record: dict[str, Any] = {"cell": run.cell, "params": run.params, "seed": run.seed, "folder": str(run.relpath),
                              "log": f"{run.relpath}.log", "metrics": {}}
    results = read_results(folder)
    if results is None:
        record["status"] = "started" if has_config(folder) else "not run"
        return record
    record["status"] = results.get("status", "finished")
    record["wall_s"] = results.get("wall_seconds")
    for key, value in (results.get("final_metrics") or {}).items():
        record["metrics"][f"final/{key}"] = value
    evaluation = folder / "eval" / f"{STEM}.json"  # the executor's Job.eval_name
    if evaluation.exists():
        result = json.loads(evaluation.read_text())
        per_problem = result.get("per_problem") or {}
        for key, value in (result.get("metrics") or {}).items():
            record["metrics"][f"heldout/{key}"] = value
            scores = per_problem.get(key)
            # the plain mean over problems only: a metric weighted per problem (tokens) has no such crossed interval
            if scores and isinstance(value, (int, float)) and math.isclose(sum(scores) / len(scores), value,
                                                                            rel_tol=1e-6, abs_tol=1e-9):
                record.setdefault("scores", {})[f"heldout/{key}"] = scores
        for key, diff in (result.get("difference") or {}).items():
            if diff and diff.get("value") is not None:
                record["metrics"][f"gain/{key}"] = diff["value"]
                # what gain_over_seeds needs; the per-problem values are dropped from sweep.json (build)
                record.setdefault("gains", {})[f"gain/{key}"] = {
                    "gain": diff["value"], "interval": [diff.get("low"), diff.get("high")],
                    "problems": (result.get("data") or {}).get("problems"),
                    "differences": stats.per_problem_gains(result, key)}
        record["heldout_order"] = list(result.get("metrics") or {})
    return record


def _names(metric: str) -> tuple[str, ...]:
    """What `--metric` (or a sweep file's `metric`) may name, in order: as given, then gain/, heldout/, final/."""
    return (metric, f"gain/{metric}", f"heldout/{metric}", f"final/{metric}")


TASK_MEASURE = "exact_match"  # held-out exact match on the task: what a sweep asks first, wherever it is evaluated


def key_metric(spec: SweepSpec, records: list[dict[str, Any]], algorithm) -> str | None:
    """The metric the report ranks: the sweep's `metric` (_names), else the gain in the family's task measure
    (held-out exact match wherever the evaluation scores it; not, e.g., DPO's implicit preference accuracy, which
    rises while the task falls), else the family's first held-out metric's gain, else the evaluation's first
    metric's gain, else a key training metric."""
    present = {m for r in records for m in r["metrics"]}
    if spec.metric:  # not logged (yet): the name as given, and the report says so
        return next((name for name in _names(spec.metric) if name in present), spec.metric)
    evaluated = next((r["heldout_order"] for r in records if r.get("heldout_order")), [])
    nano_book = NANO_BOOK.get(algorithm.family)
    for m in (TASK_MEASURE, *(nano_book.heldout if nano_book else ()), *evaluated):
        if f"gain/{m}" in present:
            return f"gain/{m}"
    return next((f"final/{m}" for m in (*algorithm.key_metrics, "loss") if f"final/{m}" in present), None)


def check_metric_logged(spec: SweepSpec, sweep_dir: Path) -> None:
    """`--report --metric NAME`: a RecipeError naming the metrics the runs have when none of them logged NAME
    (as NAME, gain/NAME, heldout/NAME or final/NAME), instead of a report whose every cell is empty."""
    from rlhf_recipes.errors import RecipeError

    present = sorted({m for run in spec.runs() for m in run_record(sweep_dir, run)["metrics"]})
    name = spec.metric
    if not name or any(m in present for m in _names(name)):
        return
    if not present:
        raise RecipeError(f"{sweep_dir}: --metric {name}: no run of this sweep has finished, so none has logged "
                          "any metric yet; run the sweep first")
    raise RecipeError(f"{sweep_dir}: --metric {name}: no run logged it (looked for {', '.join(_names(name))}); "
                      f"the runs have: {', '.join(present)}")


SEEDS_ONLY = "95% Student-t interval of the mean over seeds (scipy.stats.t)"
NO_PROBLEMS = "; no per-problem scores recorded, so the problems' noise is not in it"


def _over(interval: dict[str, Any]) -> str:
    """What an interval is over, in a few words for tables and legends."""
    if interval.get("problems"):
        return "seeds and problems" if interval["n"] > 1 else "problems (one seed)"
    return "seeds"


def _crossed(per_seed_problems: dict[int, list[float]]) -> dict[str, Any] | None:
    """The interval over seeds and problems of seeds x problems values (lab/stats.py gain_interval): the seeds are
    scored on the same problems, so a spread over seeds alone cannot see the problems' noise."""
    rows = list(per_seed_problems.values())
    if not rows or len({len(r) for r in rows}) != 1:
        return None
    return stats.gain_interval(rows)


def aggregate(records: list[dict[str, Any]], key: str | None, goal: str = "maximize") -> dict:
    """Cells (ranked by the key metric's mean) with every metric's statistics, and every pair's difference. One
    interval rule: where the runs were scored on the same held-out problems (gain/<m>, heldout/<m>), the interval
    over seeds and problems (lab/stats.py; a gain's `learns` is its low end above 0, the rule nano-book's table
    uses); a training value (final/<m>), the t interval over seeds. Each interval names its `method` and `over`."""
    cells: dict[str, dict[str, Any]] = {}
    for r in records:
        cell = cells.setdefault(r["cell"], {"cell": r["cell"], "params": r["params"], "per_seed": {}, "gains": {},
                                            "problems": {}})
        if r["status"] == "finished":
            for name, value in r["metrics"].items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    cell["per_seed"].setdefault(name, {})[r["seed"]] = float(value)
            for name, gain in (r.get("gains") or {}).items():
                cell["gains"].setdefault(name, []).append(gain)
                if gain.get("differences") is not None:
                    cell["problems"].setdefault(name, {})[r["seed"]] = gain["differences"]
            for name, scores in (r.get("scores") or {}).items():
                cell["problems"].setdefault(name, {})[r["seed"]] = scores
    problems_of: dict[str, dict[str, dict[int, list[float]]]] = {}
    for cell in cells.values():
        per_seed, gains = cell.pop("per_seed"), cell.pop("gains")
        problems_of[cell["cell"]] = problems = cell.pop("problems")
        cell["metrics"] = {name: {**stats.seed_interval(list(values.values())), "per_seed": values,
                                  "method": SEEDS_ONLY, "over": "seeds"}
                           for name, values in sorted(per_seed.items())}
        for name, metric in cell["metrics"].items():
            if name in gains:
                if len(gains[name]) == len(per_seed.get(name, {})):
                    over = stats.gain_over_seeds(gains[name])
                    metric.update(low=over["low"], high=over["high"], learns=over["learns"], method=over["method"],
                                  over=_over(over))
            elif name.startswith("heldout/"):
                crossed = _crossed(problems[name]) if len(problems.get(name, {})) == metric["n"] else None
                if crossed is not None:
                    metric.update(low=crossed["low"], high=crossed["high"], method=crossed["method"],
                                  over=_over(crossed))
                else:
                    metric["method"] += NO_PROBLEMS
        cell["seeds_finished"] = sorted(per_seed.get(key, {})) if key else []
        cell["learns"] = cell["metrics"].get(key, {}).get("learns")  # the key metric's: what `learns` follows
    sign = -1 if goal == "minimize" else 1
    ranked = sorted(cells.values(), key=lambda c: (c["metrics"].get(key, {}).get("mean") is None,
                                                   -sign * (c["metrics"].get(key, {}).get("mean") or 0.0)))
    pairs = []
    for a, b in combinations(ranked, 2):
        if key in a["metrics"] and key in b["metrics"]:
            pairs.append({"a": a["cell"], "b": b["cell"], "metric": key,
                          **pair_difference(a["metrics"][key]["per_seed"], b["metrics"][key]["per_seed"],
                                            problems_of[a["cell"]].get(key, {}), problems_of[b["cell"]].get(key, {}))})
    return {"cells": ranked, "pairs": pairs}


def pair_difference(a: dict[int, float], b: dict[int, float], a_problems: dict[int, list[float]],
                    b_problems: dict[int, list[float]]) -> dict[str, Any]:
    """a - b over the seeds both cells finished: over seeds and problems where both recorded per-problem values
    on the same problems (a's gain minus b's on each problem: the base cancels), else the paired t over seeds."""
    out = stats.paired_difference(a, b)
    seeds = out["seeds"]
    if seeds and all(s in a_problems and s in b_problems and len(a_problems[s]) == len(b_problems[s]) for s in seeds):
        crossed = _crossed({s: [x - y for x, y in zip(a_problems[s], b_problems[s])] for s in seeds})
        if crossed is not None:
            out.update(low=crossed["low"], high=crossed["high"], method=crossed["method"],
                       excludes_zero=bool(crossed["low"] > 0 or crossed["high"] < 0))
            return {**out, "over": _over(crossed)}
    return {**out, "over": "seeds"}


def ranked_by(spec: SweepSpec, key: str | None) -> str:
    """Why the report ranks by `key`, in words."""
    if key is None:
        return "nothing: no run has finished"
    if spec.metric:
        return f"{key}: the sweep's metric (--metric or the sweep file's metric.name)"
    if key == f"gain/{TASK_MEASURE}":
        return f"{key}: the default, the family's task measure (held-out exact match, minus the base's)"
    first = "the first held-out metric" if key.startswith("gain/") else "no held-out evaluation"
    return f"{key}: the default ({first}, as the runs have no held-out {TASK_MEASURE})"


def build(spec: SweepSpec, sweep_dir: Path) -> dict[str, Any]:
    records = [run_record(sweep_dir, run) for run in spec.runs()]
    algorithm = spec.recipe_of().algorithm  # resolved once per report (it is rewritten as each run finishes)
    key = key_metric(spec, records, algorithm)
    summary = aggregate(records, key, spec.goal)
    seeds = max((len(c["seeds_finished"]) for c in summary["cells"]), default=0)
    return {
        "what": "a controlled experiment: every cell of the grid x every seed is one run of the runner",
        "sweep": {"recipe": spec.recipe, "profile": spec.profile, "grid": spec.grid, "seeds": spec.seeds,
                  "overrides": spec.overrides, "source": spec.source},
        "key_metric": key, "goal": spec.goal, "ranked_by": ranked_by(spec, key),
        "training_metric": (NANO_BOOK[algorithm.family].training if algorithm.family in NANO_BOOK
                            else next(iter(algorithm.key_metrics), "loss")),
        "statistics": {"interval": "95%; where the runs were scored on the same held-out problems (gain/<m>, "
                                   "heldout/<m>, and pairs of cells in them): over seeds and problems (lab/stats.py "
                                   "gain_interval); a training value (final/<m>): Student-t over seeds; each "
                                   "interval's `method` and `over` beside it",
                       "seeds_per_cell": seeds, "warning": stats.few_seeds_warning(seeds)},
        **summary,
        "runs": [{**{k: v for k, v in r.items() if k != "scores"},
                  **({"gains": {k: {n: v for n, v in g.items() if n != "differences"} for k, g in r["gains"].items()}}
                     if r.get("gains") else {})} for r in records],
        "not_finished": [{"run": r["folder"], "status": r["status"], "log": r["log"]}
                         for r in records if r["status"] != "finished"],
    }


def _num(value: float | None, signed: bool = False) -> str:
    # not document.number: a whole-number seed value prints as 1.23e+04 / +3 like the rest of its column
    return "-" if value is None else f"{value:{'+.3g' if signed else '.3g'}}"


def _interval(values: dict[str, Any], signed: bool = False) -> str:
    if values.get("low") is None:
        return _num(values.get("mean"), signed)
    return f"{_num(values['mean'], signed)} [{_num(values['low'], signed)}, {_num(values['high'], signed)}]"


def text(report: dict[str, Any]) -> str:
    """sweep.txt: the cells table (ranked), the pairs table, what each interval is over, the notes."""
    key = report["key_metric"]
    # Beside a gain, the evaluated value itself (e.g. held-out exact match after training).
    heldout = [f"heldout/{key.removeprefix('gain/')}"] if key and key.startswith("gain/") else []
    learns = ["learns"] if heldout else []  # a gain: its interval over seeds and problems above zero
    columns = ("rank", "cell", "seeds", f"{key}\nmean [95%]", "seed std", "per seed", *heldout, *learns)
    cells = table(f"sweep of {Path(report['sweep']['recipe']).name}"
                  f"{' --profile ' + report['sweep']['profile'] if report['sweep']['profile'] else ''}: "
                  f"ranked by {report.get('ranked_by', key)} ({report['goal']})", columns,
                  right=set(columns) - {"cell", "per seed"})
    signed = bool(key and key.startswith("gain/"))
    for rank, cell in enumerate(report["cells"], 1):
        key_stats = cell["metrics"].get(key, {})
        per_seed = ", ".join(f"{s}: {_num(v, signed)}" for s, v in (key_stats.get("per_seed") or {}).items())
        cells.add_row(str(rank), cell["cell"], str(key_stats.get("n", 0)), _interval(key_stats, signed),
                      _num(key_stats.get("std")), per_seed or "-",
                      *(_interval(cell["metrics"].get(m, {})) for m in heldout),
                      *({True: "yes", False: "no"}.get(key_stats.get("learns"), "-") for _ in learns))
    pairs = table(f"differences in {key} between cells (paired: the seeds both finished"
                  f"{', on the same problems' if any(p['over'] != 'seeds' for p in report['pairs']) else ''})",
                  ("a", "b", "a - b [95%]", "seeds", "excludes 0"), right=("a - b [95%]", "seeds", "excludes 0"))
    for p in report["pairs"]:
        diff = {"mean": p["difference"], "low": p["low"], "high": p["high"]}
        pairs.add_row(p["a"], p["b"], _interval(diff, True), str(len(p["seeds"])),
                      "yes" if p["excludes_zero"] else ("-" if p["low"] is None else "no"))
    warning = report["statistics"]["warning"]
    named: dict[tuple[str, str], list[str]] = {}  # (over, method) -> the columns whose interval it is
    for metric in (key, *heldout):
        for c in report["cells"]:
            stats_ = c["metrics"].get(metric, {})
            if stats_.get("low") is not None and metric not in named.setdefault((stats_["over"], stats_["method"]), []):
                named[(stats_["over"], stats_["method"])].append(metric)
    for p in report["pairs"]:
        if p["low"] is not None and "a - b" not in named.setdefault((p["over"], p["method"]), []):
            named[(p["over"], p["method"])].append("a - b")
    said = [f"[95%] of {', '.join(columns_)}: over {over}: {method}." for (over, method), columns_ in named.items()]
    if learns:
        said.append(f"learns: the {key} interval's low end above 0.")
    unfinished = [f"not finished: {r['run']} ({r['status']}); log: {r['log']}" for r in report["not_finished"]]
    return render_text([cells, *([pairs] if report["pairs"] else []), *said,
                        *([f"Note: {warning}."] if warning else []), *unfinished])


def wrote(into: Path) -> str:
    """The line that names a report's three files in `into`."""
    return document_wrote(into / f"{STEM}.{suffix}" for suffix in ("json", "txt", "png"))


def write(spec: SweepSpec, sweep_dir: Path, into: Path | None = None) -> str:
    """sweep.json, sweep.txt and sweep.png of the runs in sweep_dir, written into `into` (default: sweep_dir);
    returns sweep.txt's text."""
    from lab.sweep.plot import plot

    report = build(spec, sweep_dir)
    rendered = text(report)
    into = sweep_dir if into is None else into
    write_result(report, into / f"{STEM}.json", text=rendered, text_path=into / f"{STEM}.txt",
                 draw=lambda path: plot(report, sweep_dir, path), figure_path=into / f"{STEM}.png")
    return rendered
