"""The executor's live view: queued / running / finished / failed, elapsed, ETA, and the runs in flight.

In a terminal, a rich table that redraws itself (rich's Live, twice a second); in a log or CI (no terminal), one
line per run that starts or ends. The ETA is "unknown" until a run that trained in this invocation has finished;
then each run is taken to last their mean wall time, and the queued runs are laid onto the workers as they free.
"""

from __future__ import annotations

import heapq
import threading
import time

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

SHOWN_FINISHED = 6  # the last few ended runs stay in the table; the counts say the rest


def clock(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" if seconds >= 3600 else \
        f"{seconds // 60}:{seconds % 60:02d}"


class Progress:
    def __init__(self, jobs, workers: int, title: str, console: Console | None = None):
        self.total, self.workers, self.title = len(jobs), workers, title
        self.console = console or Console(stderr=True)
        self.started_at = time.monotonic()
        self.running: dict[str, float] = {}  # job name -> start time
        self.ended: list[tuple[str, str, float, str | None]] = []  # (name, status, wall, error)
        self.walls: list[float] = []  # runs that did work in this invocation: the ETA's unit
        self._lock = threading.Lock()
        self._live = Live(console=self.console, refresh_per_second=2, transient=False, get_renderable=self.render) \
            if self.console.is_terminal else None

    def __enter__(self):
        if self._live is not None:
            self._live.__enter__()
        return self

    def __exit__(self, *exc):
        if self._live is not None:
            self._live.__exit__(*exc)  # its last redraw shows the final counts
        return False

    def counts(self) -> dict[str, int]:
        statuses = [e[1] for e in self.ended]
        return {"queued": self.total - len(self.ended) - len(self.running), "running": len(self.running),
                "finished": statuses.count("finished"), "failed": statuses.count("failed"),
                "interrupted": statuses.count("interrupted"), "still running": statuses.count("still running")}

    def eta(self) -> float | None:
        """Seconds until every run has ended; None (unknown) before any run that did work has finished."""
        c = self.counts()
        if c["queued"] + c["running"] == 0:
            return 0.0
        if not self.walls:
            return None
        mean = sum(self.walls) / len(self.walls)
        now = time.monotonic()
        with self._lock:  # each worker's time until it is free: a running run's expected rest, else now
            free = [max(0.0, mean - (now - t)) for t in self.running.values()]
        free += [0.0] * max(0, self.workers - len(free))
        heapq.heapify(free)
        for _ in range(c["queued"]):  # the next queued run goes to the worker that frees first
            heapq.heappush(free, heapq.heappop(free) + mean)
        return max(free)

    def summary(self) -> str:
        c = self.counts()
        line = (f"{self.title}: {c['queued']} queued, {c['running']} running, {c['finished']} finished, "
                f"{c['failed']} failed")
        if c["interrupted"]:
            line += f", {c['interrupted']} interrupted"
        if c["still running"]:  # held by another live process (executor.run_one): not failed, not ours to run
            line += f", {c['still running']} still running elsewhere"
        eta = self.eta()
        per_run = f" (runs take ~{clock(sum(self.walls) / len(self.walls))})" if self.walls and eta else ""
        return line + (f"; elapsed {clock(time.monotonic() - self.started_at)}, "
                       f"ETA {'unknown until a run finishes' if eta is None else clock(eta)}{per_run}")

    def start(self, job) -> None:
        with self._lock:
            self.running[job.name] = time.monotonic()
        if self._live is None:
            self.console.print(f"start {job.name} -> {job.folder}", highlight=False)

    def finish(self, outcome) -> None:
        name = outcome.job.name
        with self._lock:
            self.running.pop(name, None)
            self.ended.append((name, outcome.status, outcome.wall_s, outcome.error))
            if outcome.did in ("trained", "resumed", "restarted") and outcome.status == "finished":
                self.walls.append(outcome.wall_s)  # not an evaluation alone: far shorter than a run
        if self._live is None:
            what = "already done" if outcome.did == "nothing" else f"{outcome.did}, {clock(outcome.wall_s)}"
            error = f": {outcome.error}" if outcome.error else ""
            self.console.print(f"{outcome.status} {name} ({what}){error} | {self.summary()}", highlight=False)

    def render(self):
        table = Table(title=self.summary(), title_justify="left", expand=False)
        for column in ("run", "status", "time"):
            table.add_column(column)
        now = time.monotonic()
        with self._lock:
            for name, since in self.running.items():
                table.add_row(name, "running", clock(now - since))
            for name, status, wall, _ in self.ended[-SHOWN_FINISHED:]:
                style = {"failed": "red", "interrupted": "yellow", "still running": "yellow"}.get(status, "green")
                table.add_row(name, f"[{style}]{status}[/]", clock(wall))
        return Group(table)
