"""The runner's tools: what a user runs around one training run, one subcommand each of `rlhf-recipes` (cli.py maps
the names to each module's main): show, preflight, plan, compare, evaluate, results, runs, chat, export.
document.py is the one writer of their JSON, tables and figures; policy.py the one loader of a trained policy.
Commands over many runs (sweeps, the nano figures, the HH pipeline) join from installed packages through cli.py's
command group.

Tools ask the registry (rlhf_recipes/registry.py) for algorithm facts; none keeps its own table.
"""
