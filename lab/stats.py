"""Statistics over training seeds: a cell's mean and interval, and the difference between two cells.

Why Student's t (scipy.stats) and not a bootstrap: a sweep has few seeds per cell (2-10). A bootstrap over 3
values can only return 10 distinct resampled means and its interval is far too narrow; rliable's stratified
bootstrap and interquartile mean are built for many tasks x many runs, and with 3 runs the IQM is the median.
The t interval is exact for normal seed-to-seed noise and honestly wide with few seeds (with 2 seeds its 95%
half-width is 12.7 standard errors). Two cells are compared seed by seed: the same seed gives both the same data
order and initialisation, so the paired difference removes that shared part of the noise.

A gain over a base measured on held-out problems has a second source of noise: the problems. Every seed is scored on
the SAME problems, so the spread over seeds cannot see it (three seeds that agree give a zero-width interval while
each seed's own interval over problems is 10 points wide). `gain_interval` takes both: seeds and problems are
crossed (every seed x every problem), so the variance of the mean gain is the seeds' part, var(per-seed mean gain)
/ S, plus the problems' part, var(per-problem gain averaged over the seeds) / P -- the problems resampled jointly
across the seeds' paired differences, as a pigeonhole bootstrap (Owen 2007) would, computed exactly instead of by
resampling (no draw noise, and no bootstrap over 3 seeds). Both parts hold the seed x problem interaction once, so
the sum slightly over-states the variance (conservative, as the pigeonhole bootstrap is). Each part is widened by
its own Student t quantile (S - 1 and P - 1 degrees of freedom) and the two half-widths add in quadrature:
sqrt(t_{S-1}^2 seed part + t_{P-1}^2 problem part). So the interval is never narrower than the seed interval above
nor than a t interval over the problems alone. Simulated (3 seeds x 200 problems, normal seed, problem and interaction
noise, 4000 draws each) it covered the true gain 95-99% of the time from seed-dominated to problem-dominated noise;
one Welch-Satterthwaite t on the summed variance covered only 93% where the seeds dominate (its 2 degrees of
freedom are stretched over the whole variance), the seed interval alone 82% where the problems do.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

CONFIDENCE = 0.95


def t_multiplier(n: int, confidence: float = CONFIDENCE) -> float:
    """Student's t quantile for a two-sided interval of the mean of n values (n - 1 degrees of freedom)."""
    from scipy import stats

    return float(stats.t.ppf(0.5 + confidence / 2, n - 1))


def _t_interval(values: list[float], t_test, confidence: float) -> dict[str, Any]:
    """Mean, sample std (ddof 1) and the t interval of the mean (t_test(): scipy's test of these values); fewer
    than two values: no spread, no interval."""
    n = len(values)
    mean = sum(values) / n if n else None
    if n < 2:
        return {"n": n, "mean": mean, "std": None, "low": None, "high": None}
    with warnings.catch_warnings():  # seeds that agree (to the last bits) warn of precision loss: the interval is
        warnings.simplefilter("ignore", RuntimeWarning)  # then the point, as it should be
        ci = t_test().confidence_interval(confidence)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return {"n": n, "mean": mean, "std": std, "low": float(ci.low), "high": float(ci.high)}


def seed_interval(values: list[float], confidence: float = CONFIDENCE) -> dict[str, Any]:
    """Mean, sample std and the t interval of the mean over seeds (scipy's ttest_1samp)."""
    from scipy import stats

    return _t_interval(values, lambda: stats.ttest_1samp(values, 0.0), confidence)


def paired_difference(a: dict[int, float], b: dict[int, float], confidence: float = CONFIDENCE) -> dict[str, Any]:
    """a - b over the seeds both cells ran: mean difference, its t interval (scipy's ttest_rel), and whether it
    excludes zero."""
    from scipy import stats

    seeds = sorted(set(a) & set(b))
    after, before = [a[s] for s in seeds], [b[s] for s in seeds]
    summary = _t_interval([x - y for x, y in zip(after, before)], lambda: stats.ttest_rel(after, before), confidence)
    low, high = summary["low"], summary["high"]
    return {"seeds": seeds, "difference": summary["mean"], "std": summary["std"], "low": low, "high": high,
            "excludes_zero": bool(low is not None and (low > 0 or high < 0)),
            "method": f"paired t over {len(seeds)} common seeds"}


GAIN_METHOD = ("95% t interval over seeds and problems (crossed: every seed scored on the same problems); variance "
               "parts var(per-seed mean gain)/seeds and var(per-problem gain averaged over seeds)/problems, each "
               "times its t quantile (seeds-1, problems-1 df), added in quadrature (lab/stats.py)")
GAIN_FROM_INTERVALS = ("95% t interval over seeds and problems, from each seed's recorded paired-bootstrap interval "
                       "(no per-problem values recorded): parts var(per-seed gain)/seeds and (mean per-seed standard "
                       "error over problems)^2, the problems' share as if every seed erred on the same problems (an "
                       "upper bound), each part times its t quantile, added in quadrature "
                       "(lab/stats.py)")


def _crossed(mean: float, seed_part: float, seeds: int, problem_part: float, problems: int, method: str,
             confidence: float) -> dict[str, Any]:
    """mean +- sqrt(t_{seeds-1}^2 seed_part + t_{problems-1}^2 problem_part) (module docstring); a part of 0 (one
    seed, or seeds that agree) adds nothing."""
    seed_t = t_multiplier(seeds, confidence) if seed_part > 0 else 0.0
    problem_t = t_multiplier(problems, confidence) if problem_part > 0 else 0.0
    half = math.sqrt(seed_t ** 2 * seed_part + problem_t ** 2 * problem_part)
    return {"mean": mean, "low": mean - half, "high": mean + half, "seed_part": seed_part,
            "problem_part": problem_part, "method": method}


def gain_interval(differences: Sequence[Sequence[float]], confidence: float = CONFIDENCE) -> dict[str, Any]:
    """The mean gain over seeds and problems and its interval (module docstring). differences[s][j]: seed s's
    score minus the base's on problem j, the same problems in the same order for every seed. One seed: the
    problems' part alone (the seed-to-seed noise is not measured, and the method says so)."""
    import numpy as np

    d = np.asarray(differences, dtype=float)
    if d.ndim != 2 or d.size == 0:
        raise ValueError(f"gain_interval needs a seeds x problems array of differences, got shape {d.shape}")
    seeds, problems = d.shape
    seed_part = float(d.mean(axis=1).var(ddof=1)) / seeds if seeds > 1 else 0.0
    problem_part = float(d.mean(axis=0).var(ddof=1)) / problems if problems > 1 else 0.0
    method = GAIN_METHOD if seeds > 1 else "one seed: 95% t interval over problems only (seed noise not measured)"
    return {"n": seeds, "problems": problems,
            **_crossed(float(d.mean()), seed_part, seeds, problem_part, problems, method, confidence)}


def gain_interval_from_seed_intervals(gains: Sequence[float], intervals: Sequence[Sequence[float]], problems: int,
                                      confidence: float = CONFIDENCE) -> dict[str, Any]:
    """gain_interval for runs that recorded only each seed's gain and its paired interval over problems
    ([low, high] at `confidence`): each seed's standard error over problems is read back from its interval's width,
    and the problems' share of the mean's variance is bounded above by the square of their mean (the share when
    every seed's per-problem gains move together; by Cauchy-Schwarz no correlation gives more)."""
    from statistics import NormalDist

    seeds = len(gains)
    if seeds == 0 or len(intervals) != seeds:
        raise ValueError(f"{seeds} gains and {len(intervals)} intervals: one interval per seed expected")
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    errors = [(high - low) / (2 * z) for low, high in intervals]
    mean = sum(gains) / seeds
    seed_part = sum((g - mean) ** 2 for g in gains) / (seeds - 1) / seeds if seeds > 1 else 0.0
    problem_part = (sum(errors) / seeds) ** 2
    method = GAIN_FROM_INTERVALS + ("" if seeds > 1 else "; one seed: seed noise not measured")
    return {"n": seeds, "problems": problems,
            **_crossed(mean, seed_part, seeds, problem_part, problems, method, confidence)}


def per_problem_gains(result: dict[str, Any], metric: str) -> list[float] | None:
    """after - base on each problem for `metric`, from an evaluation with its baseline (`rlhf-recipes evaluate
    --baseline`'s per_problem and baseline_per_problem); None for an evaluation that recorded no per-problem values."""
    after, before = result.get("per_problem") or {}, result.get("baseline_per_problem") or {}
    if metric not in after or metric not in before:
        return None
    return [a - b for a, b in zip(after[metric], before[metric])]


def gain_over_seeds(seeds: Sequence[dict[str, Any]], confidence: float = CONFIDENCE) -> dict[str, Any]:
    """The one rule the nano-book and sweep reports share for a gain over the base on held-out problems. Each of
    `seeds` is one run's {"gain", "interval": [low, high] (its paired interval over problems), "problems",
    "differences" (per-problem after - base, or None where the run recorded none)}. gain_interval on every run's
    differences when all recorded them, else gain_interval_from_seed_intervals; "learns": the low end above zero."""
    recorded = [s.get("differences") for s in seeds]
    bounds = [b for s in seeds for b in (s.get("interval") or [None, None])]
    if seeds and all(d is not None for d in recorded) and len({len(d) for d in recorded}) == 1:
        out = gain_interval(recorded, confidence)
    elif seeds and seeds[0].get("problems") and all(b is not None and math.isfinite(b) for b in bounds):
        out = gain_interval_from_seed_intervals([s["gain"] for s in seeds], [s["interval"] for s in seeds],
                                                seeds[0]["problems"], confidence)
    else:  # neither per-problem values nor intervals over problems: the seeds alone
        out = {**seed_interval([s["gain"] for s in seeds], confidence), "method": "95% t interval over seeds only"}
    return {**out, "learns": bool(out["low"] is not None and out["low"] > 0)}


def few_seeds_warning(n: int) -> str | None:
    """What an interval over n seeds means, said plainly when n is small."""
    if n <= 1:
        return "one seed per cell: no interval over seeds; any difference may be seed noise"
    if n <= 3:
        return (f"{n} seeds per cell: the 95% interval assumes normal seed noise and is very wide "
                f"(t = {t_multiplier(n):.1f} standard errors); a difference that excludes zero is suggestive, "
                "not settled, and one that does not says little. Use 5 or more seeds for a claim")
    return None

