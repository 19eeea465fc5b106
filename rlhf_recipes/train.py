"""Train one recipe: recipe -> checks -> data -> model -> trainer -> train -> save -> report.

`recipes/run.py` (also under `accelerate launch`) and `rlhf-recipes train` both call `main()` here. The run folder's
rules (its lock, --resume, --overwrite, its status from `running` to how it ended) are run_setup.py's.
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
from pathlib import Path

from rlhf_recipes.config import RecipeError, load_recipe
from rlhf_recipes.preflight import needed_packages
from rlhf_recipes.quiet import explain_once, leave_out_unused, quiet_known_noise
from rlhf_recipes.report import plot_curves
from rlhf_recipes.run_folder import CONFIG_FILE, EXIT_INTERRUPTED, FINAL_RESULTS_FILE
from rlhf_recipes.run_setup import (Ending, configure_reporting, end_wandb_run, is_main_process, prepare_output_dir,
                                    run_callbacks, write_run_card)
from rlhf_recipes.show import recipe_help
from rlhf_recipes.signals import signals_stop_the_start
from rlhf_recipes.validation import check_inputs

logger = logging.getLogger("rlhf_recipes")

EXIT_HEALTH_STOP = 3  # stop_on_health_warning ended the run
EXIT_FAILED = 1  # the run failed in a way it reports in one line (a NaN, a full disk, no step trained)


def main(argv: list[str] | None = None, extra_callbacks: tuple = (), own_process: bool = False) -> int:
    """`extra_callbacks`: trainer callbacks added to the run's own (as the recipe's `heldout_target` adds
    evaluation/target.py's); one with an `attach(trainer)` method gets the trainer before training.
    `own_process`: the process exists for this run (`cli`), so libraries it does not need may stay unloaded."""
    quiet_known_noise()
    argv = sys.argv[1:] if argv is None else argv
    folder, ending = None, Ending()
    try:
        if "-h" in argv or "--help" in argv:
            print(recipe_help(argv))
            return 0
        with signals_stop_the_start():  # SIGTERM while loading: one line, the start undone (as Ctrl-C)
            recipe = load_recipe(argv, construct=False)
            if own_process:
                leave_out_unused(needed_packages(recipe))
            folder = prepare_output_dir(recipe, command=shlex.join(["recipes/run.py", *argv]))  # lock, what it resumes
            check_inputs(recipe)  # every mistake the files show, before anything loads
            folder.claim(recipe)  # config.yaml, final_results.json `running`, console.log
            configure_reporting(recipe, resuming=folder.checkpoint is not None)
            explain_once(recipe)
            trainer, family, interrupt, health = build(recipe, folder, extra_callbacks, argv)
            ending.trainer = trainer
        trainer.train(resume_from_checkpoint=str(folder.checkpoint) if folder.checkpoint else None)
        return finish(recipe, folder, trainer, family, interrupt, health, ending)
    except BaseException as e:
        return ending.failed(e, folder)  # one line and its exit code for what the runner understands, else raises
    finally:
        end_wandb_run()
        if folder is not None:
            folder.end(ending)  # final_results.json says how it ended (a start that failed is undone); the lock goes


def build(recipe, folder, extra_callbacks: tuple = (), argv: list[str] = ()):
    """Data, model and trainer: everything that can fail before the first step. `argv`: the run's command line."""
    from rlhf_recipes.cpu_launch import set_torch_threads, skip_unused_shm_op
    from rlhf_recipes.data import load_splits
    from rlhf_recipes.models import load_tokenizer
    from rlhf_recipes.nano import build_missing_bases
    from rlhf_recipes.registry import family_of
    from rlhf_recipes.run_evaluations import heldout_target, periodic_evaluation

    # An embedded nano base (nano, nano-sdpo) is built once by its own SFT recipe through this runner, and cached.
    build_missing_bases(recipe.model.model_name_or_path)
    family = family_of(recipe.algorithm)
    set_torch_threads(recipe)  # before the data: a source may sample from a model (the nano pairs)
    skip_unused_shm_op()  # a DeepSpeed launch on a CPU: no C++ build of an op training never calls
    recipe.model, recipe.training  # noqa: B018  (builds TRL's configs: their own checks raise RecipeError here)
    folder.agree_on_checkpoint()  # the process group is up now (TrainingArguments): every rank resumes the same one
    tokenizer = load_tokenizer(recipe.model)
    train, eval = load_splits(recipe)
    if getattr(recipe.training, "num_generations", None) is not None:  # it generates: TRL never truncates prompts
        from rlhf_recipes.model_checks import check_prompt_positions

        check_prompt_positions(recipe, tokenizer, train)
    periodic = periodic_evaluation(recipe)  # eval_every: the held-out problems are built before the model loads
    target = heldout_target(recipe, list(argv))  # the recipe's heldout_target: train to it, keep that checkpoint
    model = family.load_model(recipe, tokenizer)
    callbacks, interrupt, health = run_callbacks(recipe, folder)
    attached = [c for c in (periodic, target, *extra_callbacks) if c is not None]
    trainer = family.build_trainer(recipe, model, tokenizer, train, eval, callbacks + attached)
    for callback in attached:
        if hasattr(callback, "attach"):
            callback.attach(trainer)
    return trainer, family, interrupt, health


def finish(recipe, folder, trainer, family, interrupt, health, ending: Ending) -> int:
    """Training ended without an error: the final model, final_results.json, curves.png."""
    output_dir = folder.output_dir
    if trainer.state.global_step == 0 and not (interrupt.interrupted or health.stopped_because):
        # TRL ends "successfully" when its dataloader yields no full batch (fewer training rows than one optimizer
        # step or rollout batch takes): without this the run read `finished` with an untrained model saved.
        rows = len(trainer.train_dataset) if getattr(trainer, "train_dataset", None) is not None else "?"
        raise RecipeError(f"{recipe.source}: trained 0 optimizer steps: the training split's {rows} rows make no "
                          "full optimizer step (or rollout batch); raise num_samples, or lower effective_batch_size / "
                          "generation_batch_size")
    stopped = interrupt.interrupted or health.stopped_because is not None
    if not stopped:
        trainer.save_model(str(output_dir))
    ending.extra = {} if stopped else family.final_results(recipe, trainer)
    if health.stopped_because:
        ending.status, ending.extra["stopped_because"] = "stopped", health.stopped_because
    else:
        ending.status = "interrupted" if interrupt.interrupted else "finished"
    folder.write_results(recipe, ending)
    if is_main_process():
        write_run_card(recipe, output_dir, f"{ending.status}, {trainer.state.global_step} optimizer steps")
        plot_curves(output_dir, recipe.algorithm.key_metrics, curves_title(recipe, output_dir))
        if interrupt.interrupted:
            logger.warning("interrupted at step %d; continue with: python recipes/run.py %s --resume",
                           trainer.state.global_step, output_dir / CONFIG_FILE)
        elif health.stopped_because:
            logger.error("stopped by stop_on_health_warning: %s", health.stopped_because)
        else:
            logger.info("done: %s", output_dir / FINAL_RESULTS_FILE)
    ending.leave_together()
    if interrupt.interrupted:
        return EXIT_INTERRUPTED
    return EXIT_HEALTH_STOP if health.stopped_because else 0


def curves_title(recipe, output_dir: Path) -> str:
    """curves.png's title: which run (its folder), which algorithm and recipe, which profile."""
    profile = f", profile {recipe.args.profile}" if recipe.args.profile else ""
    return f"{output_dir}: {recipe.algorithm.name} ({Path(recipe.source).name}{profile})"


def cli(argv: list[str] | None = None) -> int:
    """The command-line entry: logging set up, then `main`."""
    logging.basicConfig(level=os.environ.get("LOGLEVEL", "INFO"), format="%(levelname)s %(name)s: %(message)s")
    return main(argv, own_process=True)


if __name__ == "__main__":
    sys.exit(cli())
