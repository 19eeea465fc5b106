"""Confidence intervals over problems, as pure functions (numpy only, seeded: the same call gives the same numbers).

  wilson             a rate over problems (each problem 0 or 1): the Wilson score interval, which keeps its
                     coverage near nominal for small n and rates near 0 or 1, where the normal interval does not;
  bootstrap          a mean over problems (scores, lengths, pass@k, a token-weighted loss): the percentile
                     bootstrap, problems resampled with replacement;
  paired_bootstrap   after - before on the SAME problems: the problems are resampled once per draw and both
                     models' means taken on that draw, so the per-problem correlation narrows the interval;
  pass_at_k          the unbiased pass@k estimator of Chen et al. 2021 (Codex): 1 - C(n-c, k) / C(n, k).
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Callable, Sequence

import numpy as np

CONFIDENCE = 0.95
BOOTSTRAP_DRAWS = 2000


def weighted_mean(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    return (values * weights).sum(axis=-1) / np.maximum(weights.sum(axis=-1), 1e-12)


def wilson(successes: float, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Wilson score interval for a binomial rate; (nan, nan) without trials."""
    if n <= 0:
        return math.nan, math.nan
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = successes / n
    center = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, center - half), min(1.0, center + half)


def _draws(n: int, seed: int, draws: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, n, size=(draws, n))


def bootstrap(values: Sequence[float], seed: int, weights: Sequence[float] | None = None,
              transform: Callable[[np.ndarray], np.ndarray] | None = None, confidence: float = CONFIDENCE,
              draws: int = BOOTSTRAP_DRAWS) -> tuple[float, float]:
    """Percentile bootstrap interval of the (weighted) mean over problems, optionally transformed (e.g. exp)."""
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        return math.nan, math.nan
    w = np.ones_like(v) if weights is None else np.asarray(weights, dtype=float)
    idx = _draws(v.size, seed, draws)
    stats = weighted_mean(v[idx], w[idx])
    if transform is not None:
        stats = transform(stats)
    alpha = (1 - confidence) / 2
    return float(np.quantile(stats, alpha)), float(np.quantile(stats, 1 - alpha))


def paired_bootstrap(after: Sequence[float], before: Sequence[float], seed: int,
                     after_weights: Sequence[float] | None = None, before_weights: Sequence[float] | None = None,
                     transform: Callable[[np.ndarray], np.ndarray] | None = None, confidence: float = CONFIDENCE,
                     draws: int = BOOTSTRAP_DRAWS) -> tuple[float, float, float]:
    """(difference, low, high) of mean(after) - mean(before) over the same problems, resampled together."""
    a, b = np.asarray(after, dtype=float), np.asarray(before, dtype=float)
    if a.size != b.size:
        raise ValueError(f"paired bootstrap needs the same problems: {a.size} vs {b.size} values")
    if a.size == 0:
        return math.nan, math.nan, math.nan
    wa = np.ones_like(a) if after_weights is None else np.asarray(after_weights, dtype=float)
    wb = np.ones_like(b) if before_weights is None else np.asarray(before_weights, dtype=float)
    f = transform or (lambda x: x)
    point = float(f(weighted_mean(a, wa)) - f(weighted_mean(b, wb)))
    idx = _draws(a.size, seed, draws)
    stats = f(weighted_mean(a[idx], wa[idx])) - f(weighted_mean(b[idx], wb[idx]))
    alpha = (1 - confidence) / 2
    return point, float(np.quantile(stats, alpha)), float(np.quantile(stats, 1 - alpha))


def pass_at_k(n: int, correct: int, k: int) -> float:
    """Probability that at least one of k samples (drawn without replacement from the n taken) is correct."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples per problem, got {n}")
    if n - correct < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - correct + 1, n + 1))
