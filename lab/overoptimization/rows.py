"""The bookkeeping: measurements (measure.py's per-problem, per-sample numbers) -> the rows and fits of
overoptimization.json. Pure functions of plain data; every mean over held-out problems carries its 95% Student-t
interval over problems (lab/stats.py).

  best_of_n rows   per proxy (`proxy_name`) and n: KL = log n - (n-1)/n (analytic), d = sqrt(KL), the expected
                   gold and proxy scores of the proxy's pick among n base samples (lab/kl.py's best_of_n_pick, per
                   problem);
  rl rows          per proxy and measured step (step 0 = the base): the sampled KL, gold and proxy scores;
  direct rows      per algorithm, beta and step: the sampled KL and gold score;
  fits             Gao et al.'s forms on gold(d) - gold(0): best-of-n's per proxy, RL's per proxy and per
                   direct-alignment run (the RL form: both move the policy by gradient steps).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from lab.kl import best_of_n_pick, kl_best_of_n
from lab.overoptimization.formulas import fit_best_of_n, fit_rl, pairwise_accuracy


def over_problems(values: list[float]) -> dict[str, Any]:
    """Mean over problems with its 95% t interval (None bounds with fewer than 2 problems)."""
    from lab.stats import seed_interval

    s = seed_interval([float(v) for v in values])
    return {"mean": s["mean"], "low": s["low"], "high": s["high"], "problems": s["n"]}


def _per_problem_mean(groups: list[list[float]]) -> list[float]:
    return [float(np.mean(g)) for g in groups]


def _cells(prefix: str, per_problem: list[float]) -> dict[str, Any]:
    """{prefix, prefix_low, prefix_high}: the mean over problems and its 95% t interval."""
    summary = over_problems(per_problem)
    return {prefix: summary["mean"], f"{prefix}_low": summary["low"], f"{prefix}_high": summary["high"]}


def proxy_scale(base: dict[str, Any], proxy: str) -> tuple[float, float]:
    """(mean, std) of the proxy's scores over every base sample: proxies have their own units (a preference RM's
    logit, an ORM's probability), so the figure draws each proxy in standard deviations of its base scores."""
    flat = np.asarray([v for g in base["proxy"][proxy] for v in g], dtype=float)
    return float(flat.mean()), float(flat.std()) or 1.0


def _proxy_cells(scale: tuple[float, float], per_problem: list[float]) -> dict[str, Any]:
    """The proxy's cells, and `proxy_z`: its mean in the proxy's base units (`scale`: proxy_scale's)."""
    mean, std = scale
    cells = _cells("proxy", per_problem)
    return {**cells, "proxy_z": (cells["proxy"] - mean) / std}


def proxy_accuracy(base: dict[str, Any], proxy: str) -> dict[str, Any]:
    """Held-out pairwise accuracy against the gold ordering, per problem over the pairs of its base samples whose
    gold scores differ; the mean over the problems that have such a pair."""
    per = [pairwise_accuracy(s, g) for s, g in zip(base["proxy"][proxy], base["gold"])]
    return over_problems([a for a in per if a is not None])


def best_of_n_rows(base: dict[str, Any], proxy: str, ns: list[int]) -> list[dict[str, Any]]:
    rows, scale = [], proxy_scale(base, proxy)
    for n in ns:
        picks = [best_of_n_pick(s, g, n) for s, g in zip(base["proxy"][proxy], base["gold"])]
        kl = kl_best_of_n(n)
        rows.append({"proxy_name": proxy, "n": n, "kl": kl, "d": math.sqrt(kl),
                     "kl_method": "analytic: log n - (n-1)/n", **_cells("gold", [g for g, _ in picks]),
                     **_proxy_cells(scale, [p for _, p in picks])})
    return rows


def trajectory_rows(base: dict[str, Any], measured: dict[str, Any], scored_by: str | None,
                    **labels: Any) -> list[dict[str, Any]]:
    """A run's rows, step 0 (the base, from its best-of-n samples: KL 0 exactly) first, then every measured
    checkpoint in step order, with the proxy `scored_by`'s scores (None: none); `labels` (proxy, or algorithm and
    beta) go into every row."""
    def proxy(groups: list[list[float]] | None) -> dict[str, Any]:
        return {} if scored_by is None or groups is None else \
            _proxy_cells(proxy_scale(base, scored_by), _per_problem_mean(groups))

    rows = [{"step": 0, "kl": 0.0, "kl_low": 0.0, "kl_high": 0.0, "d": 0.0, "kl_logratio": 0.0,
             **_cells("gold", _per_problem_mean(base["gold"])), **proxy(base["proxy"].get(scored_by))}]
    for step in sorted(measured["steps"], key=int):
        m = measured["steps"][step]
        kl = _cells("kl", _per_problem_mean(m["kl"]))
        rows.append({"step": int(step), **kl, "d": math.sqrt(max(kl["kl"], 0.0)),
                     "kl_logratio": float(np.mean(_per_problem_mean(m["kl_logratio"]))),
                     **_cells("gold", _per_problem_mean(m["gold"])),
                     "mean_tokens": float(np.mean(_per_problem_mean(m["tokens"]))), **proxy(m.get("proxy"))})
    return [{**labels, **r} for r in rows]


def turn(base: dict[str, Any], measured: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Does the gold score fall after its highest point? The last step minus the highest-scoring step, paired over
    problems (t interval). The highest point is picked from noisy estimates, so this leans towards a fall: a fall
    counts only when its whole interval is below zero."""
    from lab.stats import seed_interval

    peak = max(rows, key=lambda r: r["gold"])
    last = rows[-1]

    def per_problem(step: int) -> list[float]:
        return _per_problem_mean(base["gold"] if step == 0 else measured["steps"][str(step)]["gold"])

    diff = seed_interval([a - b for a, b in zip(per_problem(last["step"]), per_problem(peak["step"]))])
    return {"peak_step": peak["step"], "peak_d": peak["d"], "peak_gold": peak["gold"], "last_step": last["step"],
            "last_d": last["d"], "last_minus_peak": diff["mean"], "low": diff["low"], "high": diff["high"],
            "falls": diff["high"] is not None and diff["high"] < 0}


def fits(rows: list[dict[str, Any]], key: str, form: str) -> dict[str, Any]:
    """Per value of `key` (a proxy, a run): Gao et al.'s form fitted to gold(d) - gold(d = 0)."""
    out = {}
    for name in dict.fromkeys(r[key] for r in rows):
        mine = sorted((r for r in rows if r[key] == name), key=lambda r: r["d"])
        start = mine[0]["gold"]
        fitter = fit_best_of_n if form == "best_of_n" else fit_rl
        out[name] = fitter([r["d"] for r in mine], [r["gold"] - start for r in mine])
    return out
