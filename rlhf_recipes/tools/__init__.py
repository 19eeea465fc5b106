"""The tools wing: everything a user runs around training, one subcommand each of `rlhf-recipes` (cli.py maps the
names to each module's main). lab/ is the experiment kernel the multi-run tools share: the job runner, seed
statistics, the one writer of JSON, tables and figures, the one policy loader.

Tools ask the registry (rlhf_recipes/registry.py) for algorithm facts; none keeps its own table.
"""
