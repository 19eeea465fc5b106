"""KL and best-of-n: the one module the many-run tools (the HH pipeline, the over-optimization study) take them from."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def kl_best_of_n(n: int) -> float:
    """KL(best-of-n || base) = log n - (n - 1) / n nats (0 for n = 1): Stiennon et al. 2020; Gao et al. 2022,
    section 2; an upper bound that is tight when the scores have no ties."""
    if n < 1:
        raise ValueError(f"best-of-n needs n >= 1, got {n}")
    return math.log(n) - (n - 1) / n


def best_of_n_weights(m: int, n: int) -> np.ndarray:
    """P(the sample of rank j, 0 = lowest of m, is the highest of a uniformly drawn n-subset) = C(j, n-1) / C(m, n)."""
    if not 1 <= n <= m:
        raise ValueError(f"best-of-n from m samples needs 1 <= n <= m, got n={n}, m={m}")
    total = math.comb(m, n)
    return np.array([math.comb(j, n - 1) / total for j in range(m)])


def best_of_n_pick(proxy: Sequence[float], gold: Sequence[float], n: int) -> tuple[float, float]:
    """(expected gold, expected proxy) of the proxy's highest-scored sample among n drawn without replacement from
    the m samples of one prompt: exact, over every n-subset (a U-statistic, unbiased for best-of-n from the base's
    distribution). Ties in the proxy are broken uniformly at random, so a tied group contributes its mean gold."""
    s, g = np.asarray(proxy, dtype=float), np.asarray(gold, dtype=float)
    tied_gold = np.array([g[s == v].mean() for v in s])  # a random tie-break picks the tied group's mean
    order = np.argsort(s, kind="stable")
    w = best_of_n_weights(len(s), n)
    return float(w @ tied_gold[order]), float(w @ s[order])


def sampled_kl(policy, ref, prompt_ids: list[list[int]], completion_ids: list[list[int]], pad_id: int,
               temperature: float = 1.0, batch_size: int = 64,
               exact: bool = True) -> tuple[list[float], list[float]]:
    """(exact KL sums, log-ratio sums) of each (prompt, completion sampled from `policy`) pair, an estimate of
    KL(pi || pi_ref) per completion: the sum over its tokens of the exact next-token KL, and the plain sum of
    log pi/pi_ref at the sampled tokens (generation.pair_kl, which the quantization KL of `rlhf-recipes evaluate`
    uses too), both models' next-token distributions at `temperature`.
    exact=False: only the log-ratio sum (the first list comes back empty), as generation.completion_logprobs of each
    model in turn: one [batch, tokens, vocab] tensor at a time instead of both models' and their product, which at a
    real vocabulary (~150k) is what decides whether an evaluation batch fits."""
    from rlhf_recipes.generation import completion_logprobs, pair_kl

    if not exact:
        sums = [[total for total, _ in completion_logprobs(model, prompt_ids, completion_ids, pad_id, batch_size,
                                                           desc="log-probs for the KL", temperature=temperature)]
                for model in (policy, ref)]
        return [], [a - b for a, b in zip(*sums)]
    pairs = pair_kl(policy, ref, prompt_ids, completion_ids, pad_id, batch_size, temperature)
    return [e for e, _, _ in pairs], [r for _, r, _ in pairs]
