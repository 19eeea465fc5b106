"""Train one recipe: the pipeline every run follows, recipe -> data -> model -> trainer -> train -> report.

`recipes/run.py` (the used-by entry point, also under `accelerate launch`) and `rlhf-recipes train`
both call `main()` here.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

from rlhf_recipes.config import RecipeError, load_recipe
from rlhf_recipes.run_setup import (
    configure_reporting, is_main_process, prepare_output_dir, run_callbacks,
)

logger = logging.getLogger("rlhf_recipes")

EXIT_INTERRUPTED = 130


def main(argv: list[str] | None = None) -> int:
    try:
        recipe = load_recipe(sys.argv[1:] if argv is None else argv)
        output_dir, checkpoint = prepare_output_dir(recipe)
    except RecipeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    configure_reporting(recipe)

    # Heavy imports only once the recipe is known to be valid.
    from rlhf_recipes.data import load_splits
    from rlhf_recipes.models import load_tokenizer
    from rlhf_recipes.registry import family_of
    from rlhf_recipes.report import plot_curves, write_final_results

    family = family_of(recipe.algorithm)
    tokenizer = load_tokenizer(recipe.model)
    train, eval = load_splits(recipe)
    model = family.load_model(recipe, tokenizer)
    callbacks, interrupt = run_callbacks(output_dir, checkpoint)
    trainer = family.build_trainer(recipe, model, tokenizer, train, eval, callbacks)

    start = time.time()
    trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    wall = time.time() - start

    if not interrupt.interrupted:
        trainer.save_model(str(output_dir))
    extra = {} if interrupt.interrupted else family.final_results(recipe, trainer)
    if is_main_process():
        write_final_results(recipe, trainer, output_dir, wall, interrupt.interrupted, extra)
        plot_curves(output_dir, recipe.algorithm.key_metrics, f"{recipe.algorithm.name} ({Path(recipe.source).name})")
        if interrupt.interrupted:
            logger.warning("interrupted at step %d; continue with: python recipes/run.py %s --resume",
                           trainer.state.global_step, output_dir / "config.yaml")
        else:
            logger.info("done: %s", output_dir / "final_results.json")
    # Ranks leave together and close the process group themselves: a rank that exits while another
    # still writes results can abort in the communication backend's teardown.
    trainer.accelerator.wait_for_everyone()
    trainer.accelerator.end_training()
    return EXIT_INTERRUPTED if interrupt.interrupted else 0


def cli(argv: list[str] | None = None) -> int:
    """The command-line entry: logging set up, then `main`."""
    logging.basicConfig(level=os.environ.get("LOGLEVEL", "INFO"), format="%(levelname)s %(name)s: %(message)s")
    return main(argv)


if __name__ == "__main__":
    sys.exit(cli())
