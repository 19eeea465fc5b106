"""One module per algorithm family: how its data, models and trainer are put together.

Each module defines `FAMILY`, an instance of a subclass of `Family` (families/base.py, where the
hooks and their defaults are listed); `registry.family_of(algorithm)` returns it.
"""
