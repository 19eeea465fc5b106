"""The options a config class accepts and their types, read from the class once and cached.

Checking a recipe's keys and value types needs the fields of TRL's config classes, and importing
them pulls in transformers' trainer stack (about 6 s; TRL imports peft, bitsandbytes, wandb and
deepspeed on the way). So the fields are read from the classes themselves the first time and
kept as JSON under the cache folder, keyed by the TRL and transformers versions and by the source
of our own config classes: a changed class or an upgraded TRL gets a new schema, never a stale one.
After that, a mistyped key or a wrong type is reported before torch is even imported.
That refusal is all the cache is for: the values themselves live in the config objects (config.py builds them).

A type is kept as a small JSON descriptor: "any", "none", "bool", "int", "float", "str", "dict",
{"list": T}, {"union": [T, ...]}, {"literal": [values]}, {"enum": [values]}.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import os
import sys
import types
import typing
from pathlib import Path
from typing import Any

import yaml

SCHEMA_FORMAT = 1  # bump when the descriptor format changes
_SCALARS = {bool: "bool", int: "int", float: "float", str: "str", dict: "dict", type(None): "none"}


class Mismatch(Exception):
    """A value that does not fit its type."""


# --------------------------------------------------------------------------------------
# Annotations -> descriptors


def describe(annotation: Any) -> Any:
    if annotation is Any or annotation is None or isinstance(annotation, (str, typing.ForwardRef)):
        return "any" if annotation is not None else "none"
    if annotation in _SCALARS:
        return _SCALARS[annotation]
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return {"union": [describe(a) for a in args]}
    if origin is typing.Literal:
        return {"literal": list(args)}
    if origin in (list, tuple, typing.List):
        return {"list": describe(args[0]) if args else "any"}
    if origin in (dict, typing.Dict):
        return "dict"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return {"enum": [m.value for m in annotation]}
    return "any"


def text(desc: Any) -> str:
    """A descriptor as people write the type: `float`, `int | None`, `list[str]`."""
    if isinstance(desc, str):
        return "None" if desc == "none" else desc
    if "union" in desc:
        return " | ".join(text(d) for d in desc["union"])
    if "list" in desc:
        return f"list[{text(desc['list'])}]"
    if "literal" in desc:
        return "one of " + ", ".join(repr(v) for v in desc["literal"])
    return "one of " + ", ".join(repr(v) for v in desc["enum"])


def _resolve_hints(cls: type) -> dict[str, Any]:
    hints: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass):
            module = sys.modules.get(klass.__module__)
            try:
                hints.update(typing.get_type_hints(klass, vars(module) if module else None))
            except Exception:  # forward refs we cannot resolve: fall back to raw annotations
                hints.update(getattr(klass, "__annotations__", {}))
    return hints


def read_fields(cls: type) -> dict[str, dict[str, Any]]:
    """{field: {"type": descriptor, "default": value (JSON-able defaults only)}} of a dataclass."""
    hints = _resolve_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        entry: dict[str, Any] = {"type": describe(hints.get(f.name, Any))}
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else dataclasses.MISSING)
        if default is not dataclasses.MISSING:
            if isinstance(default, enum.Enum):
                default = default.value
            try:
                json.dumps(default)
                entry["default"] = default
            except TypeError:
                pass
        out[f.name] = entry
    return out


# --------------------------------------------------------------------------------------
# The cache


def _cache_dir() -> Path:
    from rlhf_recipes.tiny import cache_root

    return cache_root() / "schemas"


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "none"


def _cache_key(class_path: str) -> str:
    module = class_path.partition(":")[0]
    parts = [str(SCHEMA_FORMAT), class_path, _version("trl"), _version("transformers")]
    if not module.startswith("trl"):  # our own classes: their package's source is part of the key
        # (the whole top-level package, not only the class's module: PPOConfig's fields include those of
        # BookGRPOConfig, defined in another module)
        spec = importlib.util.find_spec(module.partition(".")[0])
        roots = list(spec.submodule_search_locations or []) if spec is not None else []
        for root in roots:
            parts.extend(p.read_text() for p in sorted(Path(root).rglob("*.py")))
        if not roots and spec is not None and spec.origin:
            parts.append(Path(spec.origin).read_text())
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:20]


def import_object(path: str) -> Any:
    """The class (or object) at `module:Class`, imported now. Config and trainer classes are named by these
    strings (the registry's) so that checking a recipe does not import TRL: this is where a string becomes a class."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def fields_of(class_path: str) -> dict[str, dict[str, Any]]:
    """The fields of the config class at `module:Class`, from the cache when it is there."""
    path = _cache_dir() / f"{class_path.replace(':', '.')}-{_cache_key(class_path)}.json"
    if path.exists():
        try:
            return json.loads(path.read_text())
        except ValueError:
            pass  # a half-written cache file: read the class again
    fields = read_fields(import_object(class_path))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(fields))
        tmp.replace(path)
    except OSError:
        pass  # a read-only home: the schema is simply read from the class each time
    return fields


# --------------------------------------------------------------------------------------
# Values


def coerce(value: Any, desc: Any) -> Any:
    """`value` converted to the type `desc` describes, or Mismatch.

    Strings from the command line (and YAML's `1e-6`, which PyYAML reads as a string) are
    converted when the field's type says how.
    """
    if desc == "any":
        return value
    if isinstance(desc, dict) and "union" in desc:
        options = desc["union"]
        # Only YAML's own spellings of null: "none" is a real value of e.g. report_to.
        if (value is None or (isinstance(value, str) and value in ("null", "~"))) and "none" in options:
            return None
        # Try exact matches first so "5" for `int | str` stays an int, not a string.
        for option in sorted((o for o in options if o != "none"), key=lambda o: o == "str"):
            try:
                return coerce(value, option)
            except Mismatch:
                continue
        raise Mismatch
    if isinstance(desc, dict) and ("literal" in desc or "enum" in desc):
        allowed = desc.get("literal", desc.get("enum"))
        if value in allowed:
            return value
        raise Mismatch
    if isinstance(desc, dict) and "list" in desc:
        if isinstance(value, str):
            value = yaml.safe_load(value) if value.startswith("[") else [v.strip() for v in value.split(",")]
        if not isinstance(value, (list, tuple)):
            value = [value]
        return [coerce(v, desc["list"]) for v in value]
    return _SCALAR_COERCE.get(desc, lambda v: v)(value)


def _dict(value: Any) -> dict:
    if isinstance(value, str):
        try:
            value = yaml.safe_load(value)
        except yaml.YAMLError as e:
            raise Mismatch from e
    if not isinstance(value, dict):
        raise Mismatch
    return value


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "yes", "1", "on", "false", "no", "0", "off"):
        return value.lower() in ("true", "yes", "1", "on")
    raise Mismatch


def _int(value: Any) -> int:
    if isinstance(value, bool):
        raise Mismatch
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            value = _float(value)  # "1e3": a whole number written as a float
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise Mismatch


def _float(value: Any) -> float:
    if isinstance(value, bool):
        raise Mismatch
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError as e:
            raise Mismatch from e
    raise Mismatch


def _str(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise Mismatch


def _none(value: Any) -> None:
    if value is None or value in ("null", "~"):
        return None
    raise Mismatch


_SCALAR_COERCE = {"bool": _bool, "int": _int, "float": _float, "str": _str, "dict": _dict, "none": _none}
