"""One job of the executor in one process: the run (the runner's own entry, as `recipes/run.py`), then
`rlhf-recipes evaluate` on it.

    python -m lab.train_then_evaluate RECIPE [RUN ARGS] --then-evaluate RUN [EVALUATE ARGS]

Why one process: an evaluation started in a process of its own imports torch, transformers, datasets and
reasoning-gym again; measured on this project's 2-core CPU, `rlhf-recipes evaluate` of a nano run took 5.4 CPU-s,
4.9 of them imports. The executor uses this for a job run without a launcher (under `accelerate launch` the
evaluation keeps its own process). Exit code: the run's own when it is not 0 (as recipes/run.py's); else 0 when
the evaluation succeeded, EXIT_EVALUATION_FAILED when it did not.
"""

from __future__ import annotations

import shlex
import sys
import time

THEN_EVALUATE = "--then-evaluate"
EXIT_EVALUATION_FAILED = 4  # the run finished; its evaluation did not (recipes/run.py never exits with 4)


def command_header(command: list[str]) -> str:
    """The line a job's log gives each command it runs (read back by the tests as "\n$ COMMAND")."""
    return f"\n$ {shlex.join(command)}   # {time.strftime('%Y-%m-%d %H:%M:%S')}\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    at = argv.index(THEN_EVALUATE)
    run_args, evaluate_args = argv[:at], argv[at + 1:]
    from rlhf_recipes.train import cli

    code = cli(run_args)
    if code != 0:
        return code
    # The job's log shows each step's command, as when the evaluation had its own process.
    print(command_header(["rlhf-recipes", "evaluate", *evaluate_args]), end="", flush=True)
    from rlhf_recipes.tools.evaluate import main as evaluate

    return 0 if evaluate(evaluate_args) == 0 else EXIT_EVALUATION_FAILED


if __name__ == "__main__":
    sys.exit(main())
