"""The one exception the compare tool raises on purpose."""

from __future__ import annotations


class CompareError(Exception):
    """A problem the user can fix. The message says exactly what to do; the CLI prints it
    without a traceback."""
