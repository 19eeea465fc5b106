"""The pure math of the over-optimization measurement (Gao, Schulman & Hilton 2022): a proxy's pairwise accuracy
against the gold ordering, and Gao et al.'s forms of gold(d) - gold(0), d = sqrt(KL), fitted by scipy's curve_fit
(`fit_best_of_n`, `fit_rl`). The KL and best-of-n pieces, shared with the HH pipeline, are in lab/kl.py.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Callable, Sequence

import numpy as np


def pairwise_accuracy(proxy: Sequence[float], gold: Sequence[float]) -> float | None:
    """Over the pairs of one prompt's samples whose gold scores differ: the share the proxy orders the same way
    (a proxy tie counts one half); None when every sample has the same gold score."""
    s, g = np.asarray(proxy, dtype=float), np.asarray(gold, dtype=float)
    i, j = np.triu_indices(len(s), k=1)
    differ = g[i] != g[j]
    if not differ.any():
        return None
    agree = np.sign(s[i] - s[j]) * np.sign(g[i] - g[j])
    return float(np.where(agree > 0, 1.0, np.where(agree == 0, 0.5, 0.0))[differ].mean())


def gold_best_of_n(d, alpha: float, beta: float):
    """Gao et al.'s best-of-n form: d (alpha - beta d)."""
    d = np.asarray(d, dtype=float)
    return d * (alpha - beta * d)


def gold_rl(d, alpha: float, beta: float):
    """Gao et al.'s RL form: d (alpha - beta log d), 0 at d = 0 (its limit)."""
    d = np.asarray(d, dtype=float)
    safe = np.where(d > 0, d, 1.0)
    return np.where(d > 0, d * (alpha - beta * np.log(safe)), 0.0)


def peak_best_of_n(alpha: float, beta: float) -> float:
    """The d >= 0 where d (alpha - beta d) is highest: alpha / (2 beta), or 0 for a curve that falls from the start
    (alpha <= 0); inf when it never turns (beta <= 0)."""
    return max(alpha / (2 * beta), 0.0) if beta > 0 else math.inf


def peak_rl(alpha: float, beta: float) -> float:
    """The d where d (alpha - beta log d) is highest: exp(alpha / beta - 1); inf when it never turns (beta <= 0)."""
    if beta <= 0:
        return math.inf
    exponent = alpha / beta - 1
    return math.exp(exponent) if exponent < 700 else math.inf


def fit(form: Callable, peak: Callable[[float, float], float], d: Sequence[float],
        gain: Sequence[float]) -> dict[str, Any] | None:
    """curve_fit of gain(d) = form(d, alpha, beta): coefficients with their standard errors, R^2, RMSE, the peak's
    d and gain; None with fewer than 3 points (two coefficients need a third point to be tested)."""
    from scipy.optimize import OptimizeWarning, curve_fit

    x, y = np.asarray(d, dtype=float), np.asarray(gain, dtype=float)
    if len(x) < 3:
        return None
    if not np.any(y != y[0]):  # a gold score that never moved: nothing to fit (curve_fit returns round-off)
        return {"alpha": 0.0, "beta": 0.0, "alpha_se": math.nan, "beta_se": math.nan, "r2": math.nan, "rmse": 0.0,
                "points": len(x), "peak_d": math.inf, "peak_kl": math.inf, "peak_gain": None,
                "peak_in_range": False, "flat": True}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OptimizeWarning)  # a flat curve has no covariance: reported as nan
        (alpha, beta), cov = curve_fit(form, x, y, p0=(0.1, 0.01), maxfev=20000)
    residual = y - form(x, alpha, beta)
    total = float(((y - y.mean()) ** 2).sum())
    errors = np.sqrt(np.diag(cov)) if np.all(np.isfinite(cov)) else np.array([math.nan, math.nan])
    d_peak = peak(float(alpha), float(beta))
    return {"alpha": float(alpha), "beta": float(beta), "alpha_se": float(errors[0]), "beta_se": float(errors[1]),
            "r2": 1 - float((residual ** 2).sum()) / total if total > 0 else math.nan,
            "rmse": float(np.sqrt((residual ** 2).mean())), "points": len(x),
            "peak_d": d_peak, "peak_kl": d_peak ** 2,
            "peak_gain": float(form(d_peak, alpha, beta)) if math.isfinite(d_peak) else None,
            "peak_in_range": bool(math.isfinite(d_peak) and d_peak <= x.max())}


def fit_best_of_n(d: Sequence[float], gain: Sequence[float]) -> dict[str, Any] | None:
    return fit(gold_best_of_n, peak_best_of_n, d, gain)


def fit_rl(d: Sequence[float], gain: Sequence[float]) -> dict[str, Any] | None:
    return fit(gold_rl, peak_rl, d, gain)
