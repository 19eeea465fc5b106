"""Moved to rlhf_recipes/generation.py (data/ uses it too, and data/ stands below evaluation/). This name stays
only for importers not yet moved (rlhf_recipes/tools/pipeline.py); new code imports rlhf_recipes.generation."""

from rlhf_recipes.generation import chat_ids, completion_logprobs, generate, prompt_text, throughput, token_kl  # noqa: F401
