"""The lab's commands of `rlhf-recipes`: pyproject.toml registers this mapping in the runner's command group
(rlhf_recipes.tools.cli.COMMAND_GROUP), so `rlhf-recipes sweep ...` keeps its name while the runner never names
the lab."""

from rlhf_recipes.tools.cli import Command

COMMANDS = {
    "pipeline": Command("lab.pipeline:main", "the two-phase HH-RLHF pipeline in one command"),
    "sweep": Command("lab.sweep.cli:main",
                     "a grid of settings x seeds, locally or as a SLURM array: intervals over seeds, one report"),
    "nano-book": Command("lab.nano_book:main",
                         "every recipe of a family (--family) on the nano profile: held-out gains, one figure, "
                         "a table"),
    "nano-figures": Command("lab.nano_figures:main",
                            "the book's SFT, rejection-sampling and distillation figures on nano, same metrics "
                            "and axes"),
    "overoptimization": Command("lab.overoptimization.cli:main",
                                "reward over-optimization on nano: gold vs proxy vs KL for best-of-n, RL, DPO/IPO"),
}
