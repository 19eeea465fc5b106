"""The lab: the many-run tools (sweep, nano-book, nano-figures, overoptimization, the HH pipeline) beside the runner.

It stands above rlhf_recipes, custom_losses and rewards and uses only what a user of the runner uses: load a recipe
(rlhf_recipes.config), run it (`recipes/run.py` / rlhf_recipes.train), read a run folder (rlhf_recipes.run_folder)
and evaluate it (rlhf_recipes.tools.evaluate). Nothing below imports or names it; its commands reach
`rlhf-recipes` through an entry point (commands.py).

executor.py  the plan's jobs (a run folder, its training and evaluation commands) run W at a time in their own
             processes: resume, restart, skip what is done, a failed run never stops the others, Ctrl-C stops all
train_then_evaluate.py  a job's run and its evaluation in one process (the executor's way without a launcher)
progress.py  the live progress display of an executor
stats.py     seed statistics: a mean with its 95% t interval over seeds, paired differences
kl.py        KL and best-of-n (the analytic best-of-n KL, the proxy's pick, the sampled sequence KL)
A tool is a plan (its jobs) plus a measure step (what it reads from the finished runs) plus a document
(rlhf_recipes/tools/document.py, the one writer the runner's tools share).
"""
