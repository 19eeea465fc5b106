"""Statistics over training seeds: a cell's mean and interval, and the difference between two cells.

Why Student's t (scipy.stats) and not a bootstrap: a sweep has few seeds per cell (2-10). A bootstrap over 3
values can only return 10 distinct resampled means and its interval is far too narrow; rliable's stratified
bootstrap and interquartile mean are built for many tasks x many runs, and with 3 runs the IQM is the median.
The t interval is exact for normal seed-to-seed noise and honestly wide with few seeds (with 2 seeds its 95%
half-width is 12.7 standard errors). Two cells are compared seed by seed: the same seed gives both the same data
order and initialisation, so the paired difference removes that shared part of the noise.
"""

from __future__ import annotations

import math
from typing import Any

CONFIDENCE = 0.95


def t_multiplier(n: int, confidence: float = CONFIDENCE) -> float:
    """Student's t quantile for a two-sided interval of the mean of n values (n - 1 degrees of freedom)."""
    from scipy import stats

    return float(stats.t.ppf(0.5 + confidence / 2, n - 1))


def seed_interval(values: list[float], confidence: float = CONFIDENCE) -> dict[str, Any]:
    """Mean, sample std (ddof 1) and the t interval of the mean over seeds; one seed: no spread, no interval."""
    n = len(values)
    if n == 0:
        return {"n": 0, "mean": None, "std": None, "low": None, "high": None}
    mean = sum(values) / n
    if n == 1:
        return {"n": 1, "mean": mean, "std": None, "low": None, "high": None}
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_multiplier(n, confidence) * std / math.sqrt(n)
    return {"n": n, "mean": mean, "std": std, "low": mean - half, "high": mean + half}


def paired_difference(a: dict[int, float], b: dict[int, float], confidence: float = CONFIDENCE) -> dict[str, Any]:
    """a - b over the seeds both cells ran: mean difference, its t interval, and whether it excludes zero."""
    seeds = sorted(set(a) & set(b))
    summary = seed_interval([a[s] - b[s] for s in seeds], confidence)
    low, high = summary["low"], summary["high"]
    return {"seeds": seeds, "difference": summary["mean"], "std": summary["std"], "low": low, "high": high,
            "excludes_zero": bool(low is not None and (low > 0 or high < 0)),
            "method": f"paired t over {len(seeds)} common seeds"}


def few_seeds_warning(n: int) -> str | None:
    """What an interval over n seeds means, said plainly when n is small."""
    if n <= 1:
        return "one seed per cell: no interval over seeds; any difference may be seed noise"
    if n <= 3:
        return (f"{n} seeds per cell: the 95% interval assumes normal seed noise and is very wide "
                f"(t = {t_multiplier(n):.1f} standard errors); a difference that excludes zero is suggestive, "
                "not settled, and one that does not says little. Use 5 or more seeds for a claim")
    return None

