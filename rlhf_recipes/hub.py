"""Whether to ask the Hugging Face hub: the one answer the runner and its tools share (model and dataset checks,
the data loaders, preflight, the planner's shapes). A leaf: it imports nothing of ours, so that data/ and
validation.py can both ask it without importing each other."""

from __future__ import annotations

import os
import socket


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "0").lower() in ("1", "true", "yes", "on")


def hub_offline(datasets: bool = False) -> bool:
    """The hub is switched off: HF_HUB_OFFLINE (or, for datasets, HF_DATASETS_OFFLINE), read when asked (the
    huggingface_hub constant is read once, at its import)."""
    return _env_flag("HF_HUB_OFFLINE") or (datasets and _env_flag("HF_DATASETS_OFFLINE"))


def hub_online(datasets: bool = False) -> bool:
    """Whether to ask the hub: not switched off and reachable (every "is the hub there" of the runner and its tools
    is this one)."""
    return not hub_offline(datasets) and hub_reachable()


def hub_reachable(timeout: float = 2.0) -> bool:
    """One TCP connection to the hub, not a minute of retries."""
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").split("://")[-1].split("/")[0]
    try:
        socket.create_connection((endpoint, 443), timeout=timeout).close()
        return True
    except OSError:
        return False
