"""Confidence intervals over problems (scipy.stats; seeded: the same call gives the same numbers).

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
from collections.abc import Callable, Sequence

import numpy as np

CONFIDENCE = 0.95
BOOTSTRAP_DRAWS = 2000


def weighted_mean(values: np.ndarray, weights: np.ndarray, axis: int = -1) -> np.ndarray:
    return (values * weights).sum(axis=axis) / np.maximum(weights.sum(axis=axis), 1e-12)


def wilson(successes: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Wilson score interval for a binomial rate (successes: an integer count); (nan, nan) without trials."""
    from scipy import stats

    if n <= 0:
        return math.nan, math.nan
    ci = stats.binomtest(successes, n).proportion_ci(confidence, method="wilson")
    return float(ci.low), float(ci.high)


def _percentile_bootstrap(samples: list[np.ndarray], statistic: Callable, seed: int, confidence: float,
                          draws: int) -> tuple[float, float]:
    """scipy's percentile bootstrap, the samples resampled together (one draw of problems for all of them)."""
    from scipy import stats

    if samples[0].size < 2:  # scipy refuses one problem; every draw of it is that problem
        point = float(statistic(*samples, axis=-1))
        return point, point
    ci = stats.bootstrap(samples, statistic, n_resamples=draws, paired=True, vectorized=True,
                         method="percentile", confidence_level=confidence, rng=np.random.default_rng(seed),
                         ).confidence_interval
    return float(ci.low), float(ci.high)


def _weights(values: np.ndarray, weights: Sequence[float] | None) -> np.ndarray:
    return np.ones_like(values) if weights is None else np.asarray(weights, dtype=float)


def bootstrap(values: Sequence[float], seed: int, weights: Sequence[float] | None = None,
              transform: Callable[[np.ndarray], np.ndarray] | None = None, confidence: float = CONFIDENCE,
              draws: int = BOOTSTRAP_DRAWS) -> tuple[float, float]:
    """Percentile bootstrap interval of the (weighted) mean over problems, optionally transformed (e.g. exp)."""
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        return math.nan, math.nan
    f = transform or (lambda x: x)
    return _percentile_bootstrap([v, _weights(v, weights)], lambda v, w, axis: f(weighted_mean(v, w, axis)),
                                 seed, confidence, draws)


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
    f = transform or (lambda x: x)

    def gain(a, wa, b, wb, axis=-1):
        return f(weighted_mean(a, wa, axis)) - f(weighted_mean(b, wb, axis))

    samples = [a, _weights(a, after_weights), b, _weights(b, before_weights)]
    return (float(gain(*samples)), *_percentile_bootstrap(samples, gain, seed, confidence, draws))


def pass_at_k(n: int, correct: int, k: int) -> float:
    """Probability that at least one of k samples (drawn without replacement from the n taken) is correct."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples per problem, got {n}")
    if n - correct < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - correct + 1, n + 1))
