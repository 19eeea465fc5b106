"""`rlhf-recipes sweep`: grids x seeds, each cell x seed one normal run, locally (the lab's run_plan) or as a SLURM
array.

  spec.py   what a sweep is: recipe, grid, seeds; from flags or a wandb grid sweep file; checked up front
  state.py  the folder's recorded sweep and its lock     cli.py    the command
  report.py sweep.json / sweep.txt from the run folders  plot.py   sweep.png
  slurm.py  --slurm: one job array through submitit, each task a run, requeued with a checkpoint
"""
