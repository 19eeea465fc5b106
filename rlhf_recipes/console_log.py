"""The main process's console, kept in the run folder as console.log (appended to on each resume).

What a cluster job's output file or a closed terminal loses stays with the run: the warnings, the progress bar,
the one-line errors. The copy is taken at the file descriptors, like `tee`: stdout and stderr (1 and 2) are
pointed at a pipe, and a small copier process copies each pipe to the console it replaced and to the file. Every
writer is caught that way: print, logging handlers made before the run started, tqdm, rich, and C code or child
processes. Where the console is a terminal the pipe is a pseudo-terminal instead, so progress bars and colours
still see one.

The copier is a process of its own, not a thread, so that a run that dies hard (a segfault, an NCCL watchdog's
abort, os._exit) still has its last lines copied: the kernel closes the dead process's end of the pipe and the
copier drains what was written before it ends. It ignores the signals a run stops on (Ctrl-C, SLURM's TERM and
USR1), so it outlives the run's own stop and ends only when every writer of its pipe has gone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


class ConsoleLog:
    """Copies file descriptors 1 and 2 into `path` between `start` and `stop` (one instance per run)."""

    def __init__(self, path: Path, header: str):
        self.path, self.header = path, header
        self._saved: list[tuple[int, int]] = []  # (fd, its saved copy)
        self._copiers: list[subprocess.Popen] = []

    def start(self) -> "ConsoleLog":
        with open(self.path, "ab") as f:
            f.write(f"==== {time.strftime('%Y-%m-%d %H:%M:%S %Z')} {self.header}\n".encode())
        for stream, fd in ((sys.stdout, 1), (sys.stderr, 2)):
            _flush(stream)
            saved = os.dup(fd)
            reader, writer = _pipe_like(fd)
            copier = subprocess.Popen([sys.executable, "-m", "rlhf_recipes.console_log", str(reader), str(saved),
                                       str(self.path)], pass_fds=(reader, saved), stdin=subprocess.DEVNULL,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            os.close(reader)  # the copier holds the read end; here only the write end stays open, as fd 1 or 2
            os.dup2(writer, fd)
            os.close(writer)
            self._saved.append((fd, saved))
            self._copiers.append(copier)
        return self

    def stop(self) -> None:
        """Put the consoles back; each copier ends once every writer of its pipe is gone (a child process still
        holding one is not waited for long: its copier goes on copying until that child ends)."""
        if not self._saved:
            return
        for stream in (sys.stdout, sys.stderr):
            _flush(stream)
        for fd, saved in self._saved:
            os.dup2(saved, fd)  # the pipe's last writer here closes: its copier reaches the end
            os.close(saved)
        for copier in self._copiers:
            try:
                copier.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self._saved, self._copiers = [], []


def copy(reader: int, console: int, path: str) -> None:
    """The copier: everything read from `reader` goes to `console` and to the end of `path`, until the end."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    with open(path, "ab", buffering=0) as log:
        while chunk := _read(reader):
            _write_all(console, chunk)
            log.write(chunk)


def _flush(stream) -> None:
    try:
        stream.flush()
    except (OSError, ValueError):
        pass


def _pipe_like(fd: int) -> tuple[int, int]:
    """(read end, write end): a pseudo-terminal with the console's size when `fd` is a terminal, else a pipe."""
    if os.isatty(fd):
        import fcntl
        import pty
        import termios
        import tty

        reader, writer = pty.openpty()
        tty.setraw(writer)  # no newline translation: the bytes arrive as written
        try:
            fcntl.ioctl(writer, termios.TIOCSWINSZ, fcntl.ioctl(fd, termios.TIOCGWINSZ, b"\0" * 8))
        except OSError:
            pass
        return reader, writer
    return os.pipe()


def _read(reader: int) -> bytes:
    try:
        return os.read(reader, 65536)
    except OSError:  # a pseudo-terminal whose writers have all closed reads EIO, not an empty end
        return b""


def _write_all(fd: int, data: bytes) -> None:
    try:
        while data:
            data = data[os.write(fd, data):]
    except OSError:  # the console went away (a closed terminal): the file still gets everything
        pass


if __name__ == "__main__":  # the copier process that ConsoleLog.start runs
    copy(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
