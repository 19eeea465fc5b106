"""One module per algorithm family: how its data, models and trainer are put together.

A family module provides:
  TINY_OVERLAY: dict           values the tiny profile sets for every recipe of the family
  build_trainer(recipe, model, tokenizer, train, eval, callbacks) -> transformers.Trainer
and optionally:
  derive_batch(typed, origin, world_size)   how effective batch maps to TRL's batch options
  load_model(recipe, tokenizer)             when the family's model is not a causal LM
  final_results(recipe, trainer) -> dict    extra numbers for final_results.json (e.g. RM eval)
"""
