"""Data sources: one adapter per real dataset schema, shared by real runs and the tiny profile."""

from rlhf_recipes.data.sources import SOURCES, DataError, DataSource, load_splits

__all__ = ["SOURCES", "DataError", "DataSource", "load_splits"]
