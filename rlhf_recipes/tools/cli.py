"""`rlhf-recipes <command> ...`: one installed command for training and every tool.

    rlhf-recipes train recipes/dpo.yaml --profile tiny      # the same as recipes/run.py
    rlhf-recipes show recipes/dpo.yaml --profile nano       # every setting the run would use, and where it came from
    rlhf-recipes nano build                                 # the nano base every --profile nano run starts from
    rlhf-recipes compare outputs/grpo --reference grpo      # a run against the book's published run
    rlhf-recipes preflight recipes/grpo.yaml --config_file accelerate_configs/4gpu.yaml   # will it start and finish?
    rlhf-recipes plan recipes/grpo.yaml                     # memory plan before a launch
    rlhf-recipes evaluate outputs/grpo --baseline           # held-out accuracy, before / after, with intervals
    rlhf-recipes pipeline hh --profile tiny                 # RM, then PPO / GRPO / DPO, side by side
    rlhf-recipes sweep recipes/dpo.yaml --grid beta=0.05,0.1 --seeds 3   # a controlled experiment over seeds
    rlhf-recipes nano-book                                  # every policy gradient on nano, one figure
    rlhf-recipes nano-book --family direct_alignment        # the same for DPO and its relatives
    rlhf-recipes nano-figures                               # the book's SFT, rejection-sampling, SDPO figures
    rlhf-recipes overoptimization --profile nano            # gold against proxy against KL (best-of-n, RL, DPO)
    rlhf-recipes runs --prune 2                             # every run under outputs/; keep 2 checkpoints each
    rlhf-recipes chat outputs/dpo                           # a local web page: the trained model vs its start
    rlhf-recipes export outputs/dpo exported/dpo            # a standard Hugging Face model folder + model card

The benchmarks (step time, GRPO phases, the bad-input battery, integrity costs, sweep workers) are not
installed: from a checkout, `python -m benchmarks.<name> --help` (benchmarks/README.md).

Each command's module keeps its own `main(argv)`; this file only maps names to them, imported on
use so that `rlhf-recipes compare --help` does not pay for torch.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Command:
    target: str  # "module:function", called with the remaining arguments
    summary: str
    port_flag: bool = False  # the tool takes --port (what a port-in-use line may tell the user to change)


COMMANDS: dict[str, Command] = {
    "train": Command("rlhf_recipes.train:cli", "train one recipe (what recipes/run.py runs)"),
    "show": Command("rlhf_recipes.show:main",
                    "what a run would train with: every setting and where it came from (class, algorithm, recipe, "
                    "profile, command line)"),
    "nano": Command("rlhf_recipes.nano:cli",
                    "nano build | ship: build the nano base (--sdpo: also nano-sdpo) if missing; ship: to the repo"),
    "compare": Command("rlhf_recipes.tools.compare.cli:main", "compare runs with the book's published runs or each other"),
    "preflight": Command("rlhf_recipes.tools.preflight:main",
                         "before a launch: what would stop or spoil the run (GPUs, packages, wandb, hub, disk, memory)"),
    "plan": Command("rlhf_recipes.tools.planner.cli:main", "plan a recipe's GPU memory before launching it"),
    "evaluate": Command("rlhf_recipes.tools.evaluate:main",
                        "held-out task accuracy of a run (any family), before / after with intervals"),
    "results": Command("rlhf_recipes.tools.results:main",
                       "final numbers of runs next to the book's (e.g. rejection sampling's test_accuracy)"),
    "runs": Command("rlhf_recipes.tools.runs:main",
                    "list runs (status, steps, metrics, evaluations, size); --prune K keeps K checkpoints per run"),
    "chat": Command("rlhf_recipes.tools.chat:main",
                    "a local web page to talk to trained models side by side (needs the [chat] extra)",
                    port_flag=True),
    "export": Command("rlhf_recipes.tools.export:main",
                      "a run's model as a standard Hugging Face folder with a model card (LoRA merged on request)"),
}


# Commands that other installed packages add (the many-run tools: sweep, nano-book, ...): an entry point of this group
# names a {name: Command} mapping, read when a command is looked up, as pytest finds its plugins; the runner itself
# never names the package that adds them (pyproject.toml registers it).
COMMAND_GROUP = "rlhf_recipes.commands"


def all_commands() -> dict[str, Command]:
    from importlib.metadata import entry_points

    commands = dict(COMMANDS)
    for point in entry_points(group=COMMAND_GROUP):
        commands.update(point.load())
    return commands


def usage() -> str:
    commands = all_commands()
    width = max(map(len, commands))
    lines = ["usage: rlhf-recipes <command> [args ...]   (rlhf-recipes <command> --help for its options)", "",
             "commands:"]
    lines += [f"  {name:<{width}}  {command.summary}" for name, command in commands.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    name, rest = argv[0], argv[1:]
    commands = all_commands()
    command = commands.get(name)
    if command is None:
        import difflib

        close = difflib.get_close_matches(name, commands, n=1)
        hint = f" Did you mean `{close[0]}`?" if close else ""
        if name.startswith("bench"):  # the benchmarks left the installed command
            hint = " The benchmarks run from a checkout: python -m benchmarks.<name> (benchmarks/README.md)."
        print(f"error: unknown command `{name}`.{hint} Commands: {', '.join(commands)}", file=sys.stderr)
        return 2
    module, _, function = command.target.partition(":")
    from rlhf_recipes.quiet import quiet_known_noise

    quiet_known_noise()  # every tool loads models too: the same known, harmless lines stay silent
    sys.argv = [f"rlhf-recipes {name}", *rest]  # argparse names the subcommand in its usage line
    try:
        return getattr(importlib.import_module(module), function)(rest) or 0
    except Exception as e:  # a missing package, a port in use ...: one line (tools/surroundings.py); bugs re-raise
        from rlhf_recipes.tools.surroundings import one_line

        line = one_line(f"rlhf-recipes {name}", e, port_flag=command.port_flag)
        if line is None:
            raise
        print(line, file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
