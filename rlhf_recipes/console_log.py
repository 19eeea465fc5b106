"""The main process's log, kept in the run folder as console.log (appended to on each resume).

A logging.FileHandler on the loggers a run writes through: the root logger (ours, TRL's, every library that
propagates) and transformers' (which does not propagate), from the start's claim of its folder to its end (at INFO
at least, however the caller set logging up). Each record is flushed as it is written, so a run that dies
hard keeps every line it logged. Progress bars, bare prints and the one-line errors are not in it: they
are the console's (a failed run's error is in final_results.json).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

LOGGERS = ("", "transformers")  # the root logger, and transformers', whose records stop at its own


class ConsoleLog:
    """Appends the run's log records to `path` from construction to `stop` (one instance per start)."""

    def __init__(self, path: Path, header: str):
        self.handler = logging.FileHandler(path, mode="a", encoding="utf-8")
        self.handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        self.handler.stream.write(f"==== {time.strftime('%Y-%m-%d %H:%M:%S %Z')} {header}\n")
        self.handler.flush()
        for name in LOGGERS:
            logging.getLogger(name).addHandler(self.handler)
        self._level = logging.getLogger().level
        if self._level > logging.INFO:  # a caller without logging set up (root at WARNING): its INFO lines too
            logging.getLogger().setLevel(logging.INFO)

    def stop(self) -> None:
        for name in LOGGERS:
            logging.getLogger(name).removeHandler(self.handler)
        logging.getLogger().setLevel(self._level)
        self.handler.close()
