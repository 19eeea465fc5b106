"""Profiles: recipes/profiles/<name>.yaml, the values a `--profile NAME` run sets over its recipe.

A profile file has three sections, applied in this order over the recipe (later wins; the command line wins over
all of them): `common` (every recipe), `families.<family>` (the recipe's family; a family missing there does not
run on the profile) and `algorithms.<name>` (one algorithm, where its family's values are not enough). Every
profile value lives in these files; config.load_recipe layers them, and `rlhf-recipes show` prints each value with
the section it came from.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from rlhf_recipes.errors import RecipeError
from rlhf_recipes.paths import RECIPES_DIR
from rlhf_recipes.yaml_files import read_yaml

PROFILES_DIR = RECIPES_DIR / "profiles"
SECTIONS = ("common", "families", "algorithms")


@dataclass(frozen=True)
class Profile:
    name: str
    path: Path
    common: dict[str, Any]
    families: dict[str, dict[str, Any]]
    algorithms: dict[str, dict[str, Any]]

    def runs(self, family: str) -> bool:
        """Whether recipes of this family run on the profile (the family has a section, even an empty one)."""
        return family in self.families

    def layers(self, family: str, algorithm: str) -> list[tuple[str, dict[str, Any]]]:
        """(where, values) in the order they apply: common, the family's section, the algorithm's. Copies: a run
        may change what it gets without changing the profile."""
        sections = [("common", self.common), (f"families.{family}", self.families.get(family)),
                    (f"algorithms.{algorithm}", self.algorithms.get(algorithm))]
        return [(f"profile {self.name} ({where})", copy.deepcopy(values)) for where, values in sections if values]


def profile_names() -> tuple[str, ...]:
    """The profiles there are: one file each under recipes/profiles/."""
    return tuple(sorted(p.stem for p in PROFILES_DIR.glob("*.yaml")))


@lru_cache(maxsize=None)
def read_profile(name: str) -> Profile:
    """recipes/profiles/NAME.yaml, checked for its shape (a section is a mapping; families and algorithms map names
    to mappings); the keys themselves are checked where a recipe uses them, like the recipe's own."""
    names = profile_names()
    if name not in names:
        raise RecipeError(f"profile `{name}` is unknown; available: {', '.join(names)} (files under {PROFILES_DIR})")
    path = PROFILES_DIR / f"{name}.yaml"
    data = read_yaml(path, what="profile")
    unknown = set(data) - set(SECTIONS)
    if unknown:
        raise RecipeError(f"{path}: unknown section `{sorted(unknown)[0]}`; a profile has {', '.join(SECTIONS)}")
    for section in SECTIONS:
        value = data.get(section) or {}
        if not isinstance(value, dict) or (section != "common" and not all(
                isinstance(v, dict) or v is None for v in value.values())):
            raise RecipeError(f"{path}: `{section}` must be a mapping" + ("" if section == "common" else
                              " of names to mappings of keys to values"))
    return Profile(name=name, path=path, common=data.get("common") or {},
                   families={k: v or {} for k, v in (data.get("families") or {}).items()},
                   algorithms={k: v or {} for k, v in (data.get("algorithms") or {}).items()})
