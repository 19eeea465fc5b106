"""The main process's console, kept in the run folder as console.log (appended to on each resume).

What a cluster job's output file or a closed terminal loses stays with the run: the warnings, the progress bar,
the one-line errors. The copy is taken at the file descriptors, like `tee`: stdout and stderr (1 and 2) are
pointed at a pipe, and a thread copies each pipe to the console it replaced and to the file. Every writer is
caught that way: print, logging handlers made before the run started, tqdm, rich, and C code or child processes.
Where the console is a terminal the pipe is a pseudo-terminal instead, so progress bars and colours still see one.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path


class ConsoleLog:
    """Copies file descriptors 1 and 2 into `path` between `start` and `stop` (one instance per run)."""

    def __init__(self, path: Path, header: str):
        self.path, self.header = path, header
        self._file = None
        self._saved: list[tuple[int, int]] = []  # (fd, its saved copy)
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def start(self) -> "ConsoleLog":
        self._file = open(self.path, "ab", buffering=0)
        stamp = time.strftime("%Y-%m-%d %H:%M:%S %Z")
        self._file.write(f"==== {stamp} {self.header}\n".encode())
        for stream, fd in ((sys.stdout, 1), (sys.stderr, 2)):
            _flush(stream)
            saved = os.dup(fd)
            reader, writer = _pipe_like(fd)
            os.dup2(writer, fd)
            os.close(writer)
            self._saved.append((fd, saved))
            thread = threading.Thread(target=self._copy, args=(reader, saved), daemon=True, name=f"console.log {fd}")
            thread.start()
            self._threads.append(thread)
        return self

    def _copy(self, reader: int, console: int) -> None:
        try:
            while chunk := _read(reader):
                _write_all(console, chunk)
                with self._lock:
                    self._file.write(chunk)
        finally:
            os.close(reader)

    def stop(self) -> None:
        """Put the consoles back; the copies end once every writer of the pipes is gone (a child process still
        holding one is not waited for long)."""
        if not self._saved:
            return
        for stream in (sys.stdout, sys.stderr):
            _flush(stream)
        for fd, saved in self._saved:
            os.dup2(saved, fd)  # the pipe's last writer here closes: its reader reaches the end
        for thread in self._threads:
            thread.join(timeout=5)
        for _, saved in self._saved:
            os.close(saved)
        self._saved, self._threads = [], []
        self._file.close()


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
