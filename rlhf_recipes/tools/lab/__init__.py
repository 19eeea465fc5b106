"""The lab: what every many-run tool (sweep, nano-book, nano-figures, overoptimization, the HH pipeline) shares.

kl.py       KL and best-of-n (the analytic best-of-n KL, the proxy's pick, the sampled sequence KL)
policy.py   the one loader of a trained policy
The runs themselves go through sweep/executor.py (jobs, workers, resume), their numbers through sweep/stats.py
(intervals over seeds) and the run folder through rlhf_recipes/run_folder.py; sampling is rlhf_recipes/generation.py.
"""
