"""The signals that stop a run: Ctrl-C (SIGINT), SIGTERM (a scheduler's or a sweep's stop) and SIGUSR1 (SLURM's
warning before a time limit, accelerate_configs/slurm/multinode.sbatch). Once training runs, InterruptCallback
(callbacks.py) turns each into "finish the step, save a checkpoint, stop"; before it, `signals_stop_the_start`."""

from __future__ import annotations

import signal
from contextlib import contextmanager

INTERRUPT_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)


@contextmanager
def signals_stop_the_start():
    """SIGTERM / SIGUSR1 while a run still loads (data, the nano pairs' sampling, the model) stop it as Ctrl-C does,
    by raising KeyboardInterrupt: the start is undone and says so in one line, where the signal's default action
    killed the process and left the folder reading `running` (a sweep reported it as killed). Training puts its own
    save-and-stop handler in (InterruptCallback) once this has given the old ones back."""
    def stop(signum, frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = {}
    try:
        for sig in INTERRUPT_SIGNALS[1:]:  # SIGINT already raises KeyboardInterrupt
            previous[sig] = signal.signal(sig, stop)
    except ValueError:  # not the main thread: no handler
        pass
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
