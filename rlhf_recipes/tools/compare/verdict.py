"""Is a run's final level inside the reference's own noise band?

Window. Both runs are compared over the same optimizer steps: the last 10% of the range the
two runs share (from the later of their first steps to the earlier of their last). A run
stopped at half the book's length is thus compared with the book at that same point, not
with the book's end. A window holding fewer than 3 reference points is widened to the last
3 reference points of the shared range (the noise estimate needs 2 differences); a window
holding none of the run's points takes the run's last point of the shared range.

Band. sigma = std(first differences of the reference's values in the window) / sqrt(2).
If the reference is a smooth trend plus independent noise of std s, each difference carries
noise of std s*sqrt(2) and the trend contributes only its tiny per-step slope, so sigma
estimates s (the step-to-step noise) without being inflated by the curve still rising.
The verdict is "within the reference's band" when |mean(yours) - mean(reference)| <= 2 sigma:
your final level sits where about 95% of the reference's own points would fall around its
trend. This is deliberately not a significance test of the two means (sigma/sqrt(n) would
flag almost every run with another seed, since run-to-run drift exceeds sampling noise of a
mean), and one reference run cannot tell seed-to-seed spread: read "outside" as "look at
this curve", not as "wrong".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

WINDOW_FRACTION = 0.1
BAND_SIGMAS = 2.0
MIN_REFERENCE_POINTS = 3
WITHIN = "within the reference's band"
OUTSIDE = "outside the reference's band"
NAN = float("nan")


@dataclass(frozen=True)
class Comparison:
    metric: str
    run: str
    yours: float = NAN
    reference: float = NAN
    diff: float = NAN  # yours - reference
    sigma: float = NAN  # the reference's step-to-step noise in the window
    band: float = NAN  # half-width: BAND_SIGMAS * sigma
    within: bool | None = None  # None when no verdict is possible
    verdict: str = ""
    window: tuple[float, float] | None = None
    n_yours: int = 0
    n_reference: int = 0


def shared_window(
    steps_a: np.ndarray, steps_b: np.ndarray, fraction: float = WINDOW_FRACTION
) -> tuple[float, float] | None:
    """The last `fraction` of the step range both series cover, or None if they do not overlap."""
    if len(steps_a) == 0 or len(steps_b) == 0:
        return None
    start = max(float(np.min(steps_a)), float(np.min(steps_b)))
    end = min(float(np.max(steps_a)), float(np.max(steps_b)))
    if end < start:
        return None
    return end - fraction * (end - start), end


def window_values(steps: np.ndarray, values: np.ndarray, window: tuple[float, float], min_points: int) -> np.ndarray:
    """Values inside the window in step order, widened back to `min_points` if needed."""
    order = np.argsort(steps, kind="stable")
    steps, values = np.asarray(steps)[order], np.asarray(values)[order]
    lo, hi = window
    inside = (steps >= lo) & (steps <= hi)
    if inside.sum() >= min_points:
        return values[inside]
    upto = values[steps <= hi]
    return upto[-min_points:]


def noise_sigma(values: np.ndarray) -> float:
    """Step-to-step noise: std of first differences / sqrt(2); NaN with fewer than 3 points."""
    values = np.asarray(values, dtype=float)
    if len(values) < 3:
        return NAN
    return float(np.std(np.diff(values), ddof=1) / math.sqrt(2.0))


def compare_to_reference(metric: str, run: str, yours: tuple[np.ndarray, np.ndarray],
                         reference: tuple[np.ndarray, np.ndarray], fraction: float = WINDOW_FRACTION,
                         band_sigmas: float = BAND_SIGMAS) -> Comparison:
    """Means of both over the shared final window, their difference, and the verdict."""
    window = shared_window(yours[0], reference[0], fraction)
    if window is None:
        return Comparison(metric, run, verdict="n/a: the runs share no steps")
    mine = window_values(*yours, window, min_points=1)
    ref = window_values(*reference, window, min_points=MIN_REFERENCE_POINTS)
    mean_mine, mean_ref = float(np.mean(mine)), float(np.mean(ref))
    diff = mean_mine - mean_ref
    sigma = noise_sigma(ref)
    if math.isnan(sigma):
        return Comparison(metric, run, mean_mine, mean_ref, diff,
                          verdict=f"n/a: only {len(ref)} reference point(s) by step {window[1]:g}")
    band = band_sigmas * sigma
    # The tiny tolerance keeps an exact copy of a flat reference (sigma 0) "within".
    within = abs(diff) <= band + 1e-12 * max(1.0, abs(mean_ref))
    return Comparison(metric=metric, run=run, yours=mean_mine, reference=mean_ref, diff=diff, sigma=sigma, band=band,
                      within=within, verdict=WITHIN if within else OUTSIDE, window=window, n_yours=len(mine),
                      n_reference=len(ref))


def final_mean(steps: np.ndarray, values: np.ndarray, fraction: float = WINDOW_FRACTION) -> tuple[float, int]:
    """A run's mean over the last `fraction` of its own logged step range (local comparisons)."""
    if len(steps) == 0:
        return NAN, 0
    start, end = float(np.min(steps)), float(np.max(steps))
    picked = window_values(steps, values, (end - fraction * (end - start), end), min_points=1)
    return float(np.mean(picked)), len(picked)
