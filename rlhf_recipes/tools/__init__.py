"""The tools wing: everything a user runs around training, one subcommand each of `rlhf-recipes`.

compare/   a run against the book's published runs, or runs against each other
planner/   a recipe's GPU memory, planned before launching
bench/     step time, throughput and peak memory per family (and GRPO's phases)
evaluate   a trained model on held-out data
pipeline   the two-phase HH-RLHF pipeline (reward model, then policies against it)

Tools ask the registry (rlhf_recipes/registry.py) for algorithm facts; none keeps its own table.
"""
