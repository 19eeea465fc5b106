"""KL and best-of-n: the one module the many-run tools (the HH pipeline, the over-optimization study) take them from.

  kl_best_of_n(n)          log n - (n - 1) / n: the analytic KL of best-of-n sampling from the base (Stiennon et al.
                           2020; Gao et al. 2022, section 2; an upper bound that is tight when the scores have no ties);
  best_of_n_pick(s, g, n)  the expected gold score of the proxy's pick among n samples drawn without replacement
                           from m >= n samples of one prompt (exact, over every n-subset: a U-statistic, unbiased
                           for best-of-n from the base's distribution);
  sequence_kl(...)         a sampled estimate of KL(pi || pi_ref) per completion from both models' log-probs on
                           completions sampled from pi: the sum over the completion's tokens of the exact
                           next-token KL, and the plain sum of log pi/pi_ref at the sampled tokens;
  sampled_kl(...)          sequence_kl from the two models themselves, on token ids of prompts and completions.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np


def kl_best_of_n(n: int) -> float:
    """KL(best-of-n || base) = log n - (n - 1) / n nats (0 for n = 1)."""
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
    """(expected gold, expected proxy) of the proxy's highest-scored sample among n of the m samples of one prompt.
    Ties in the proxy are broken uniformly at random, so a tied group contributes its mean gold."""
    s, g = np.asarray(proxy, dtype=float), np.asarray(gold, dtype=float)
    tied_gold = np.array([g[s == v].mean() for v in s])  # a random tie-break picks the tied group's mean
    order = np.argsort(s, kind="stable")
    w = best_of_n_weights(len(s), n)
    return float(w @ tied_gold[order]), float(w @ s[order])


def sequence_kl(policy_logp, ref_logp, ids, mask) -> tuple[list[float], list[float]]:
    """Per completion (rows of `ids`, sampled from the policy; `mask` 1 on its tokens): (sum over its tokens of
    KL(pi(.|prefix) || pi_ref(.|prefix)), sum of log pi(y_t) - log pi_ref(y_t) at the sampled tokens).
    `policy_logp`, `ref_logp`: [batch, tokens, vocab] log-softmax at the positions that predict `ids`.
    Both sums are unbiased estimates of the sequence KL; the first has less variance and is never negative."""
    mask = mask.to(policy_logp.dtype)
    exact = (policy_logp.exp() * (policy_logp - ref_logp)).sum(-1)
    picked = (policy_logp - ref_logp).gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    return (exact * mask).sum(-1).tolist(), (picked * mask).sum(-1).tolist()


def sampled_kl(policy, ref, prompt_ids: list[list[int]], completion_ids: list[list[int]], pad_id: int,
               temperature: float = 1.0, batch_size: int = 64,
               exact: bool = True) -> tuple[list[float], list[float]]:
    """sequence_kl of each (prompt, completion sampled from `policy`) pair, both models' next-token distributions at
    `temperature` with no top-k / top-p cut (a cut would make the KL infinite wherever the two cuts differ).
    exact=False: only the log-ratio sum (the first list comes back empty), as generation.completion_logprobs of each
    model in turn: one [batch, tokens, vocab] tensor at a time instead of both models' and their product, which at a
    real vocabulary (~150k) is what decides whether an evaluation batch fits."""
    import torch

    from rlhf_recipes.generation import _right_padded, completion_logprobs

    if not exact:
        sums = [[total for total, _ in completion_logprobs(model, prompt_ids, completion_ids, pad_id, batch_size,
                                                           desc="log-probs for the KL", temperature=temperature)]
                for model in (policy, ref)]
        return [], [a - b for a, b in zip(*sums)]
    exact_sums: list[float] = []
    ratio: list[float] = []
    for start in range(0, len(prompt_ids), batch_size):
        chunk = list(zip(prompt_ids[start:start + batch_size], completion_ids[start:start + batch_size]))
        ids, mask = _right_padded([p + c for p, c in chunk], pad_id)
        completion = torch.zeros_like(mask[:, 1:])  # 1 where position t predicts a completion token
        for i, (p, c) in enumerate(chunk):
            completion[i, len(p) - 1:len(p) + len(c) - 1] = 1
        targets, completion = ids[:, 1:].to(policy.device), completion.to(policy.device)
        with torch.no_grad():  # both on the policy's device
            logps = [torch.log_softmax(model(input_ids=ids.to(model.device), attention_mask=mask.to(model.device))
                                       .logits[:, :-1].float().to(policy.device) / temperature, -1)
                     for model in (policy, ref)]
        e, r = sequence_kl(logps[0], logps[1], targets, completion)
        exact_sums += e
        ratio += r
    return exact_sums, ratio
