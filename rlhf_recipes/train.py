"""Train one recipe: the pipeline every run follows, recipe -> data -> model -> trainer -> train -> report.

`recipes/run.py` (the used-by entry point, also under `accelerate launch`) and `rlhf-recipes train`
both call `main()` here.
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import sys
import time
from pathlib import Path

from rlhf_recipes.checkpoints import find_resumable_checkpoint
from rlhf_recipes.config import RecipeError, load_recipe, recipe_help
from rlhf_recipes.disk import disk_full
from rlhf_recipes.preflight import needed_packages
from rlhf_recipes.quiet import explain_once, leave_out_unused, quiet_known_noise
from rlhf_recipes.report import plot_curves
from rlhf_recipes.run_folder import CONFIG_FILE, EXIT_INTERRUPTED, FINAL_RESULTS_FILE, write_final_results
from rlhf_recipes.run_setup import (
    configure_reporting, end_wandb_run, is_main_process, prepare_output_dir, run_callbacks, write_run_card,
)
from rlhf_recipes.validation import check_inputs

logger = logging.getLogger("rlhf_recipes")

EXIT_HEALTH_STOP = 3  # stop_on_health_warning ended the run
EXIT_FAILED = 1  # the run failed in a way it reports in one line (a NaN, a full disk)


def main(argv: list[str] | None = None, extra_callbacks: tuple = (), own_process: bool = False) -> int:
    """`extra_callbacks`: trainer callbacks added to the run's own (as the recipe's `heldout_target` adds
    evaluation/target.py's); one with an `attach(trainer)` method gets the trainer before training.
    `own_process`: the process exists for this run (`cli`), so libraries it does not need may stay unloaded."""
    quiet_known_noise()
    argv = sys.argv[1:] if argv is None else argv
    if "-h" in argv or "--help" in argv:
        try:
            print(recipe_help(argv))
        except RecipeError as e:
            report_error(e)
            return 2
        return 0
    folder = console = None
    try:
        try:
            recipe = load_recipe(argv, construct=False)
            if own_process:
                leave_out_unused(needed_packages(recipe))
            folder = prepare_output_dir(recipe, command=shlex.join(["recipes/run.py", *argv]))
            check_inputs(recipe)
            folder.claim(recipe)
            console = keep_console(folder, argv)
        except BaseException as e:
            # config.yaml could not be written for want of space: the start is undone, however far undoing gets
            where = disk_full(e) if isinstance(e, OSError) else None
            try:
                if folder is not None:
                    folder.abandon()  # an --overwrite moved the old run aside: put it back
            except OSError:
                if where is None:
                    raise
            if isinstance(e, RecipeError):
                report_error(e)
                return 2
            if where is None:
                raise
            report_error(RecipeError(f"no space left on device while writing {where}; nothing was started"))
            return EXIT_FAILED
        configure_reporting(recipe, resuming=folder.checkpoint is not None)
        explain_once(recipe)
        try:
            # What must exist before the model loads: an embedded nano base (nano, nano-sdpo) is built once by its
            # own SFT recipe through this runner, announced on stderr, and cached (`rlhf-recipes nano build` runs
            # this step alone). Resolving the model's name later only finds it.
            from rlhf_recipes.nano import build_missing_bases

            build_missing_bases(recipe.model.model_name_or_path)
            trainer, family, interrupt, health = build(recipe, folder, extra_callbacks, argv)
        except BaseException as e:  # a mistake found while loading (data rows too): no trace of the run is left
            if console is not None:
                console.stop()  # before `abandon` cuts console.log back: the copier has written its last lines
            folder.abandon()
            if not isinstance(e, RecipeError):
                raise
            report_error(e)
            return 2
        return train_and_report(recipe, folder, trainer, family, interrupt, health)
    finally:
        end_wandb_run()
        if console is not None:
            console.stop()  # a no-op where already stopped
        if folder is not None:
            folder.release()  # the folder's lock: held from before the folder was read until here


def keep_console(folder, argv: list[str]):
    """The main process's console, copied into <output_dir>/console.log from here to the run's end (appended to
    when the run is resumed). None on the other ranks, or where the console cannot be copied."""
    if not is_main_process():
        return None
    from rlhf_recipes.console_log import ConsoleLog

    what = f"resumed from {folder.checkpoint.name}" if folder.checkpoint else "started"
    try:
        return ConsoleLog(folder.console_log, f"{what}: {shlex.join(['recipes/run.py', *argv])}").start()
    except OSError as e:  # no console to copy (closed descriptors), or the file cannot be opened
        logger.warning("the console is not kept in %s: %s", folder.console_log, e)
        return None


def report_error(error: Exception) -> None:
    """One line on stderr, from the main process only: under a launcher every rank finds the same mistake."""
    if is_main_process():
        print(f"error: {error}", file=sys.stderr)
    logger.debug("the error's traceback (LOGLEVEL=DEBUG)", exc_info=error)


def build(recipe, folder, extra_callbacks: tuple = (), argv: list[str] = ()):
    """Data, model and trainer: everything that can fail before the first step. `argv`: the run's command line."""
    # Heavy imports only once the recipe is known to be valid.
    from rlhf_recipes.cpu_launch import set_torch_threads, skip_unused_shm_op
    from rlhf_recipes.data import load_splits
    from rlhf_recipes.models import load_tokenizer
    from rlhf_recipes.registry import family_of

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
    from rlhf_recipes.run_evaluations import heldout_target, periodic_evaluation

    periodic = periodic_evaluation(recipe)  # eval_every: the held-out problems are built before the model loads
    target = heldout_target(recipe, list(argv))  # the recipe's heldout_target: train to it, keep that checkpoint
    model = family.load_model(recipe, tokenizer)
    callbacks, interrupt, health = run_callbacks(recipe, folder)
    attached = [c for c in (periodic, target, *extra_callbacks) if c is not None]
    callbacks += attached
    trainer = family.build_trainer(recipe, model, tokenizer, train, eval, callbacks)
    for callback in attached:
        if hasattr(callback, "attach"):
            callback.attach(trainer)
    return trainer, family, interrupt, health


def train_and_report(recipe, folder, trainer, family, interrupt, health) -> int:
    output_dir, checkpoint = folder.output_dir, folder.checkpoint
    start = time.time()
    try:
        trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    except FloatingPointError as e:  # a NaN / inf loss, gradient, weight or reward (callbacks.py, rewards/finite.py)
        return report_failure(recipe, trainer, output_dir, time.time() - start, str(e), resume_hint=(
            "; add --allow_changes --learning_rate LOWER to continue at a lower rate"))
    except BaseException as e:  # the folder says the run failed, and where, instead of looking unfinished
        where = disk_full(e, output_dir)
        if where is not None:
            return report_failure(recipe, trainer, output_dir, time.time() - start,
                                  f"no space left on device while writing {where}", full_disk=True)
        if is_main_process():
            write_final_results(recipe, trainer, output_dir, time.time() - start, status="failed",
                                extra={"error": f"{type(e).__name__}: {e}"})
        raise
    wall = time.time() - start
    if trainer.state.global_step == 0 and not (interrupt.interrupted or health.stopped_because):
        # TRL ends "successfully" when its dataloader yields no full batch (fewer training rows than one optimizer
        # step or rollout batch takes): without this the run read `finished` with an untrained model saved.
        rows = len(trainer.train_dataset) if getattr(trainer, "train_dataset", None) is not None else "?"
        return report_failure(recipe, trainer, output_dir, wall, (
            f"{recipe.source}: trained 0 optimizer steps: the training split's {rows} rows make no full optimizer "
            f"step (or rollout batch); raise num_samples, or lower effective_batch_size / generation_batch_size"))
    try:
        return finish(recipe, output_dir, trainer, family, interrupt, health, wall)
    except OSError as e:  # the final model or results met a full disk
        where = disk_full(e, output_dir)
        if where is None:
            raise
        return report_failure(recipe, trainer, output_dir, wall, f"no space left on device while writing {where}",
                              full_disk=True)


def finish(recipe, output_dir: Path, trainer, family, interrupt, health, wall: float) -> int:
    """Training ended without an error: the final model, final_results.json, curves.png."""
    stopped = interrupt.interrupted or health.stopped_because is not None
    if not stopped:
        trainer.save_model(str(output_dir))
    extra = {} if stopped else family.final_results(recipe, trainer)
    if health.stopped_because:
        status, extra = "stopped", {**extra, "stopped_because": health.stopped_because}
    else:
        status = "interrupted" if interrupt.interrupted else "finished"
    if is_main_process():
        write_final_results(recipe, trainer, output_dir, wall, status=status, extra=extra)
        write_run_card(recipe, output_dir, f"{status}, {trainer.state.global_step} optimizer steps")
        plot_curves(output_dir, recipe.algorithm.key_metrics, curves_title(recipe, output_dir))
        if interrupt.interrupted:
            logger.warning("interrupted at step %d; continue with: python recipes/run.py %s --resume",
                           trainer.state.global_step, output_dir / CONFIG_FILE)
        elif health.stopped_because:
            logger.error("stopped by stop_on_health_warning: %s", health.stopped_because)
        else:
            logger.info("done: %s", output_dir / FINAL_RESULTS_FILE)
    # Ranks leave together and close the process group themselves: a rank that exits while another
    # still writes results can abort in the communication backend's teardown.
    trainer.accelerator.wait_for_everyone()
    trainer.accelerator.end_training()
    if interrupt.interrupted:
        return EXIT_INTERRUPTED
    return EXIT_HEALTH_STOP if health.stopped_because else 0


def curves_title(recipe, output_dir: Path) -> str:
    """curves.png's title: which run (its folder), which algorithm and recipe, which profile."""
    profile = f", profile {recipe.args.profile}" if recipe.args.profile else ""
    return f"{output_dir}: {recipe.algorithm.name} ({Path(recipe.source).name}{profile})"


def report_failure(recipe, trainer, output_dir: Path, wall: float, reason: str, full_disk: bool = False,
                   resume_hint: str = "") -> int:
    """A failure the run understands (non-finite numbers, a full disk, no step trained): final_results.json says
    failed, at which step, and which checkpoint is the last good one; the console gets one line, no traceback.
    resume_hint: what to add to --resume from the last good checkpoint (non-finite numbers: a lower rate)."""
    point = find_resumable_checkpoint(output_dir)
    if full_disk and is_main_process():
        # A save the disk cut short has no manifest, so --resume would skip it anyway: removing it frees the
        # space final_results.json needs, and leaves only checkpoints that resume.
        for folder, why in point.skipped:
            if "no manifest" in why:
                shutil.rmtree(folder, ignore_errors=True)
    last_good = point.checkpoint
    for callback in trainer.callback_handler.callbacks:  # end the progress bar's line: the error gets its own
        bar = getattr(callback, "training_bar", None)
        if bar is not None:
            bar.close()
            callback.training_bar = None
    if is_main_process():
        try:
            write_final_results(recipe, trainer, output_dir, wall, status="failed",
                                extra={"error": reason, "last_good_checkpoint": last_good.name if last_good else None})
        except OSError as e:
            if disk_full(e) is None:
                raise
            reason += " (final_results.json could not be written either: rlhf-recipes runs shows no result)"
        keep = (f"the last good checkpoint, {last_good.name}, is kept (--resume continues from it{resume_hint})"
                if last_good else "no checkpoint was saved before it")
        print(f"error: {reason}; {keep}", file=sys.stderr)
    trainer.accelerator.wait_for_everyone()
    trainer.accelerator.end_training()
    return EXIT_FAILED


def cli(argv: list[str] | None = None) -> int:
    """The command-line entry: logging set up, then `main`."""
    logging.basicConfig(level=os.environ.get("LOGLEVEL", "INFO"), format="%(levelname)s %(name)s: %(message)s")
    return main(argv, own_process=True)


if __name__ == "__main__":
    sys.exit(cli())
