"""Checks and records for RL runs that users otherwise do by hand; shared by every RL trainer.

Nothing here knows GRPO: PPO (or any rollout-based trainer) can reuse it.

- health metrics per rollout batch: fraction of prompt groups with reward contrast, mean
  completion length, fraction truncated (no EOS within the budget), and a degeneracy score
  (repeated n-grams) -- `rollout_health_metrics`;
- `check_logprobs`: log-probs must be finite and <= 0 (a positive log-prob means the
  log-softmax, the gather or the masking is wrong), raised as a clear error;
- `RolloutStore`: every rollout (prompt, completion, each reward, total, advantage, step)
  in a SQLite file, queryable after the run:
      sqlite3 out/rollouts.sqlite "SELECT step, AVG(reward) FROM rollouts GROUP BY step"
- `write_samples`: a few completions with their rewards, appended to samples.jsonl and logged;
- `RolloutMonitorMixin`: a trainer's use of all of the above, once per rollout batch.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from pathlib import Path
from typing import Any, Iterable, Sequence

import torch

logger = logging.getLogger(__name__)

DEFAULT_NGRAM = 4
DEGENERATE_THRESHOLD = 0.5  # a completion whose n-grams are more than half repeats counts as degenerate


def repetition_score(token_ids: Sequence[int], n: int = DEFAULT_NGRAM) -> float:
    """Share of a completion's n-grams that repeat an earlier one: 0 for no repetition, -> 1 for a loop.

    1 - distinct n-grams / all n-grams; 0.0 when the completion has fewer than n + 1 tokens.
    """
    ids = list(token_ids)
    total = len(ids) - n + 1
    if total < 2:
        return 0.0
    distinct = len({tuple(ids[i:i + n]) for i in range(total)})
    return 1.0 - distinct / total


def is_truncated(token_ids: Sequence[int], stop_ids: Iterable[int]) -> bool:
    """True when generation hit the length budget: the last token is not an EOS (or pad) token."""
    ids = list(token_ids)
    return not ids or ids[-1] not in set(stop_ids)


def rollout_health_metrics(
    lengths: Sequence[int], truncated: Sequence[bool], repetition: Sequence[float],
    contrast: Sequence[bool] | None,
) -> dict[str, float]:
    """Batch-level health metrics (names as logged, under `health/`)."""
    n = max(len(lengths), 1)
    metrics = {
        "health/mean_completion_length": sum(lengths) / n,
        "health/truncated_fraction": sum(bool(t) for t in truncated) / n,
        "health/repetition": sum(repetition) / n,
        "health/degenerate_fraction": sum(r > DEGENERATE_THRESHOLD for r in repetition) / n,
    }
    if contrast is not None and len(contrast):
        metrics["health/groups_with_contrast"] = sum(bool(c) for c in contrast) / len(contrast)
    return metrics


def check_logprobs(logps: torch.Tensor, mask: torch.Tensor | None, where: str, tolerance: float = 1e-4) -> None:
    """Raise FloatingPointError unless every unmasked log-prob is finite and <= tolerance."""
    values = logps.detach()
    if mask is not None:
        values = values[mask.bool()]
    if values.numel() == 0:
        return
    finite = torch.isfinite(values)
    if not bool(finite.all()):
        bad = int((~finite).sum())
        raise FloatingPointError(
            f"{where}: {bad} of {values.numel()} completion-token log-probs are NaN/inf. The model's forward "
            "diverged (check the learning rate, bf16 overflow, or a corrupted checkpoint); stopping instead of "
            "training on garbage."
        )
    worst = float(values.max())
    if worst > tolerance:
        raise FloatingPointError(
            f"{where}: a log-prob is {worst:.3g} > 0. Log-probabilities of sampled tokens must be <= 0: the "
            "log-softmax, the token gather or the completion mask is wrong (e.g. logits shifted by one)."
        )


class RolloutStore:
    """Every rollout of a run in one SQLite table, `rollouts`, plus a `run` table of key/values.

    Columns: step (optimizer steps done when it was generated), generation (rollout batch
    counter), group_index, prompt (last user turn), completion, reward (the weighted total
    trained on), advantage, one REAL column per reward function (by its name), length
    (tokens), truncated, repetition, kept (1 if its group was trained on, 0 if dynamic sampling
    dropped it), prompt_json and rewards_json (everything, as JSON).
    """

    BASE_COLUMNS = (
        ("step", "INTEGER"), ("generation", "INTEGER"), ("group_index", "INTEGER"), ("prompt", "TEXT"),
        ("completion", "TEXT"), ("reward", "REAL"), ("advantage", "REAL"), ("length", "INTEGER"),
        ("truncated", "INTEGER"), ("repetition", "REAL"), ("kept", "INTEGER"), ("prompt_json", "TEXT"),
        ("rewards_json", "TEXT"),
    )

    def __init__(
        self, path: str | Path, reward_names: Sequence[str], start_step: int = 0, run_info: dict | None = None
    ):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if start_step == 0 and self.path.exists():
            self.path.unlink()  # a fresh run replaces the old file; a resumed one keeps it
        base = {name for name, _ in self.BASE_COLUMNS}
        self.reward_columns = [n for n in reward_names if n.isidentifier() and n not in base]
        self.conn = sqlite3.connect(str(self.path))
        columns = ", ".join(f'"{n}" {t}' for n, t in self.BASE_COLUMNS)
        extra = "".join(f', "{n}" REAL' for n in self.reward_columns)
        self.conn.execute(f"CREATE TABLE IF NOT EXISTS rollouts (id INTEGER PRIMARY KEY, {columns}{extra})")
        self.conn.execute("CREATE INDEX IF NOT EXISTS rollouts_step ON rollouts(step)")
        self.conn.execute("CREATE TABLE IF NOT EXISTS run (key TEXT PRIMARY KEY, value TEXT)")
        if start_step > 0:  # resumed: rows generated after the checkpoint will be generated again
            self.conn.execute("DELETE FROM rollouts WHERE step >= ?", (start_step,))
        for key, value in (run_info or {}).items():
            self.conn.execute("INSERT OR REPLACE INTO run VALUES (?, ?)", (key, json.dumps(value, default=str)))
        self.conn.commit()

    def add(self, rows: list[dict[str, Any]]) -> None:
        names = [n for n, _ in self.BASE_COLUMNS] + self.reward_columns
        placeholders = ", ".join("?" for _ in names)
        quoted = ", ".join(f'"{n}"' for n in names)
        values = []
        for row in rows:
            rewards = row.get("rewards", {})
            record = {
                **row,
                "prompt_json": json.dumps(row.get("prompt_json"), default=str),
                "rewards_json": json.dumps(rewards, default=str),
                "truncated": int(bool(row.get("truncated"))),
                "kept": int(bool(row.get("kept", True))),
            }
            values.append([_sql(record.get(n)) for n in names[: len(self.BASE_COLUMNS)]]
                          + [_sql(rewards.get(n)) for n in self.reward_columns])
        self.conn.executemany(f"INSERT INTO rollouts ({quoted}) VALUES ({placeholders})", values)
        self.conn.commit()

    def count(self) -> int:
        return int(self.conn.execute("SELECT COUNT(*) FROM rollouts").fetchone()[0])

    def close(self) -> None:
        self.conn.close()


def _sql(value: Any) -> Any:
    if isinstance(value, float) and value != value:  # NaN -> NULL
        return None
    if isinstance(value, (str, int, float)) or value is None:
        return value
    if isinstance(value, bool):
        return int(value)
    return json.dumps(value, default=str)


def write_samples(path: str | Path, step: int, samples: list[dict[str, Any]], log: logging.Logger = logger) -> None:
    """Append samples ({prompt, completion, reward, rewards, advantage}) to a JSONL file and log them."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        for s in samples:
            f.write(json.dumps({"step": step, **s}, default=str) + "\n")
    for s in samples:
        rewards = ", ".join(f"{k}={v:.3g}" for k, v in s.get("rewards", {}).items() if isinstance(v, (int, float)))
        log.info("sample @ step %d | reward %.3f (%s) | advantage %.3f\n  prompt: %s\n  completion: %s",
                 step, s.get("reward", float("nan")), rewards, s.get("advantage", float("nan")),
                 _clip(s.get("prompt", "")), _clip(s.get("completion", "")))


def _clip(text: str, limit: int = 400) -> str:
    text = str(text).replace("\n", "\\n")
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


# ------------------------------------------------------------------------------------------
# Health checks and the rollout database: reusable by any trainer that has self.accelerator,
# self.args (output_dir, log_samples_*, rollouts_db, repetition_ngram), self.state, self._metrics.


class RolloutMonitorMixin:
    """Per-batch health metrics, sample logging and the SQLite rollout store."""

    def _monitor_init(self, reward_names: list[str]) -> None:
        self._monitor_reward_names = list(reward_names)
        self._rollout_store: RolloutStore | None = None
        self._rollout_generation = 0
        self._last_samples_step: int | None = None

    def _rollout_store_path(self) -> Path | None:
        db = getattr(self.args, "rollouts_db", None)
        return Path(self.args.output_dir) / db if db else None

    def _monitor_record(
        self, mode: str, completion_ids: list[list[int]], stop_ids: list[int], prompts: list | None,
        completions: list | None, rewards: dict[str, list[float]], totals: list[float], advantages: list[float],
        kept: list[bool], group_size: int, contrast: list[bool] | None,
    ) -> None:
        """Log health metrics for this rollout batch and, on the main process, store every rollout.

        `completion_ids` are this process's; every other list is global (gathered), in the
        global order. Must be called on every process (it gathers).
        """
        from rewards.text import completion_text, prompt_text

        n_gram = getattr(self.args, "repetition_ngram", 4)
        local = torch.tensor(
            [[len(ids), float(is_truncated(ids, stop_ids)), repetition_score(ids, n_gram)] for ids in completion_ids],
            dtype=torch.float32, device=self.accelerator.device,
        ).reshape(-1, 3)
        stats = self.accelerator.gather(local).cpu()
        lengths, truncated, repetition = stats[:, 0].long().tolist(), stats[:, 1].bool().tolist(), stats[:, 2].tolist()
        for name, value in rollout_health_metrics(lengths, truncated, repetition, contrast).items():
            self._metrics[mode][name].append(value)
        self._rollout_generation += 1
        if mode != "train" or not self.accelerator.is_main_process:
            return

        step = self.state.global_step
        n = len(totals)
        have_texts = completions is not None and len(completions) == n
        texts = [completion_text(c) for c in completions] if have_texts else [None] * n
        prompt_messages = prompts if prompts is not None and len(prompts) == n else [None] * n
        rows = [
            {
                "step": step, "generation": self._rollout_generation, "group_index": i // max(group_size, 1),
                "prompt": prompt_text(prompt_messages[i]) if prompt_messages[i] is not None else None,
                "prompt_json": prompt_messages[i], "completion": texts[i], "reward": totals[i],
                "advantage": advantages[i], "rewards": {k: v[i] for k, v in rewards.items()},
                "length": lengths[i], "truncated": truncated[i], "repetition": repetition[i], "kept": kept[i],
            }
            for i in range(n)
        ]
        path = self._rollout_store_path()
        if path is not None:
            if self._rollout_store is None:
                self._rollout_store = RolloutStore(
                    path, self._monitor_reward_names, start_step=step,
                    run_info={"reward_funcs": self._monitor_reward_names, "group_size": group_size},
                )
            self._rollout_store.add(rows)

        every = getattr(self.args, "log_samples_every", 0)
        if every and (self._last_samples_step is None or step - self._last_samples_step >= every):
            self._last_samples_step = step
            count = getattr(self.args, "log_samples_count", 4)
            # One completion from each of the first groups, so the samples show different prompts.
            picks = list(range(0, n, max(group_size, 1)))[:count] or list(range(min(count, n)))
            keys = ("prompt", "completion", "reward", "rewards", "advantage")
            samples = [{k: rows[i][k] for k in keys} for i in picks]
            write_samples(Path(self.args.output_dir) / "samples.jsonl", step, samples, logger)
