"""Many runs: `rlhf-recipes sweep` (grids x seeds, locally or as a SLURM array) and the executor every multi-run
tool uses (nano-book, the HH pipeline).

  spec.py      what a sweep is: recipe, grid, seeds; from flags or a wandb grid sweep file; checked up front
  executor.py  Job, run_one (train / resume / evaluate one run to done) and Executor (W at a time, live table)
  progress.py  the live table (queued / running / finished / failed, elapsed, ETA)
  state.py     the folder's recorded sweep and its lock
  stats.py     mean, seed std and t intervals over seeds; paired differences between cells (scipy)
  report.py    sweep.json / sweep.txt from the run folders     plot.py  sweep.png
  slurm.py     --slurm: one sbatch job array                   task.py  one array task
  cli.py       the command
"""
