"""Data sources: one adapter per real dataset schema, shared by real runs and the tiny profile."""

from rlhf_recipes.data.base import DataError, DataSource
from rlhf_recipes.data.sources import SOURCES, load_splits

__all__ = ["SOURCES", "DataError", "DataSource", "load_splits"]
