"""The error a user's mistake raises: reported as one line naming where, what was expected and the fix.

Everything else (a bug, a crash inside a library) keeps its traceback."""


class RecipeError(ValueError):
    """A recipe, command line, data file or model path that cannot be run, with a message saying what to fix."""


class EvalError(RecipeError):
    """A held-out evaluation that cannot run as asked (no held-out rows, a bad judge, ...): one-line message.
    Here, on the ground floor, because data/ builds held-out sets too (data/reasoning_gym_preferences.py)."""
