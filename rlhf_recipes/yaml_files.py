"""Reading the project's YAML files (recipes, profiles, a run's config.yaml): one mapping, every key once.

A key given twice is an error naming both lines, not YAML's silent last-one-wins; a file that is missing, not YAML
or not a mapping is a one-line RecipeError naming it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from rlhf_recipes.errors import RecipeError


class _DuplicateKey(yaml.YAMLError):
    pass


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, except that a key given twice is an error, not a silent last-one-wins."""

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor` merges a mapping; its keys may repeat
                continue
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise _DuplicateKey(f"key `{key}` is set twice (lines {seen[key]} and {line}); keep one")
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: str | Path, what: str = "recipe") -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise RecipeError(f"{path}: no such {what} file")
    try:
        data = yaml.load(p.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader) or {}
    except _DuplicateKey as e:
        raise RecipeError(f"{path}: {e}") from None
    except yaml.YAMLError as e:
        raise RecipeError(f"{path}: not valid YAML: {e}") from e
    if not isinstance(data, dict):
        raise RecipeError(f"{path}: a {what} must be a mapping of keys to values, got {type(data).__name__}")
    return data
