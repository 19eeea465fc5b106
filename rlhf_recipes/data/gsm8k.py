"""openai/gsm8k (config `main`) -> conversational prompt + gold final answer.

Real schema: `question` (the problem) and `answer` (a worked solution ending "#### <n>").
Output columns: prompt ([user question], with the recipe's system_prompt prepended when set)
and answer (the gold final answer after "####", which `gsm8k_reward` checks with
math-verify). The tiny profile reads real rows shipped in fixtures/gsm8k/train.jsonl.
"""

from __future__ import annotations

from typing import Any

from rlhf_recipes.data.base import DataSource

# A prompt that asks for GSM8K's own answer format, as the book's ORM prompt does; use it
# with `system_prompt:` in a recipe (no book policy-gradient run trains on GSM8K).
SYSTEM_PROMPT = (
    "Solve the math problem step by step. End your response with the final answer on its own line, "
    "in the form '#### <number>'."
)


def normalize(row: dict[str, Any]) -> dict[str, Any]:
    question, solution = row["question"], row["answer"]
    if not isinstance(question, str) or not question.strip():
        raise ValueError(f"column `question` must be a non-empty string, got {question!r:.80}")
    if not isinstance(solution, str) or "####" not in solution:
        raise ValueError(f"column `answer` must be a solution ending in '#### <answer>', got {solution!r:.80}")
    final = solution.rsplit("####", 1)[1].strip().replace(",", "")
    if not final:
        raise ValueError(f"column `answer` has nothing after '####': {solution[-60:]!r}")
    return {"prompt": [{"role": "user", "content": question}], "answer": final}


SOURCE = DataSource(
    name="gsm8k",
    hub_id="openai/gsm8k",
    hub_config="main",
    fixture="gsm8k/train.jsonl",
    columns=("question", "answer"),
    normalize=normalize,
)
