"""`rlhf-recipes overoptimization`: gold against proxy against KL for best-of-n, RL and direct alignment
(docs/overoptimization.md). formulas.py (the pure math), plan.py (the runs), measure.py (the models on held-out
problems), rows.py (the bookkeeping), report.py (the figure and tables), cli.py (the command)."""
