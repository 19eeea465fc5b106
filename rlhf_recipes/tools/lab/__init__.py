"""The lab: what every many-run tool (sweep, nano-book, nano-figures, overoptimization, the HH pipeline) shares.

executor.py  the plan's jobs (a run folder, its training and evaluation commands) run W at a time in their own
             processes: resume, restart, skip what is done, a failed run never stops the others, Ctrl-C stops all
train_then_evaluate.py  a job's run and its evaluation in one process (the executor's way without a launcher)
progress.py  the live progress display of an executor
stats.py     seed statistics: a mean with its 95% t interval over seeds, paired differences
document.py  the one writer: a result document -> its JSON, its tables as text, its figure
kl.py        KL and best-of-n (the analytic best-of-n KL, the proxy's pick, the sampled sequence KL)
policy.py    the one loader of a trained policy
A tool is a plan (its jobs) plus a measure step (what it reads from the finished runs) plus a document. The run
folder is read and written through rlhf_recipes/run_folder.py; sampling is rlhf_recipes/generation.py.
"""
