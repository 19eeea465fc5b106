"""Get a published reference run: from the repo's cache, else from the wandb public API.

The API is used only when a quick connection test to the wandb host succeeds, so an offline
machine (CI, a cluster node) gets an immediate, clear message instead of a long hang. A
fetched history is cached once as CSV under reference_runs/ in the API-history layout, with
a small JSON file beside it saying where and when it came from. Nothing else ever writes
there: a reference is real data or it is absent.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import pandas as pd

from rlhf_recipes.tools.compare.errors import CompareError
from rlhf_recipes.tools.compare.references import ReferenceSpec

from rlhf_recipes.paths import REFERENCE_RUNS_DIR as REFERENCE_DIR, REPO_ROOT
PROBE_TIMEOUT_S = 3.0
API_TIMEOUT_S = 30
# Used only if wandb cannot tell us its default; WANDB_BASE_URL overrides both.
FALLBACK_BASE_URL = "https://api.wandb.ai"


def cache_path(spec: ReferenceSpec, directory: Path = REFERENCE_DIR) -> Path:
    return Path(directory) / f"{spec.algorithm}-{spec.run_id}.csv"


def _base_url() -> str:
    if os.environ.get("WANDB_BASE_URL"):
        return os.environ["WANDB_BASE_URL"]
    try:
        from wandb.sdk.lib.urls import DEFAULT_BASE_URL

        return str(DEFAULT_BASE_URL)
    except Exception:  # older/newer wandb layouts: any failure means "use the fallback"
        return FALLBACK_BASE_URL


def network_available(timeout: float = PROBE_TIMEOUT_S) -> tuple[bool, str]:
    """Whether the wandb API host accepts a TCP connection; the reason when it does not."""
    url = urlsplit(_base_url())
    host = url.hostname or ""
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True, ""
    except OSError as exc:
        return False, f"cannot reach {host}:{port} ({exc.__class__.__name__}: {exc})"


def _history_frame(rows: list[dict]) -> pd.DataFrame:
    """Scalar columns of scan_history rows; tables and media (dict values) are dropped."""
    scalar_rows = [{k: v for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
                   for row in rows]
    frame = pd.DataFrame.from_records(scalar_rows)
    if "_step" not in frame.columns:
        raise CompareError("The wandb API returned a history without _step; cannot align it.")
    front = [c for c in ("_step", "_runtime", "_timestamp") if c in frame.columns]
    rest = sorted(c for c in frame.columns if c not in front)
    return frame[front + rest].sort_values("_step").reset_index(drop=True)


def fetch_history(wandb_path: str, timeout: int = API_TIMEOUT_S) -> pd.DataFrame:
    """Every history row of a run (scan_history: unsampled, unlike history())."""
    import wandb  # deferred: importing wandb costs a second and is only needed here

    api = wandb.Api(timeout=timeout)
    run = api.run(wandb_path)
    return _history_frame(list(run.scan_history()))


def _write_atomically(frame: pd.DataFrame, path: Path) -> None:
    # An interrupted fetch must never leave a partial CSV that later passes for the reference.
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    os.close(fd)
    try:
        frame.to_csv(tmp, index=False)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def fetch_and_cache(spec: ReferenceSpec, directory: Path = REFERENCE_DIR,
                    fetch: Callable[[str], pd.DataFrame] | None = None) -> Path:
    """Download the run's history once and store it; returns the cached CSV's path."""
    assert spec.wandb_path is not None
    frame = (fetch or fetch_history)(spec.wandb_path)
    path = cache_path(spec, directory)
    _write_atomically(frame, path)
    provenance = {"wandb_path": spec.wandb_path, "url": spec.wandb_url,
                  "fetched_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  "method": "wandb.Api().run(path).scan_history()", "rows": len(frame)}
    path.with_suffix(".source.json").write_text(json.dumps(provenance, indent=2) + "\n")
    return path


def export_instructions(spec: ReferenceSpec, run_arg: str, book_metrics: list[tuple[str, ...]]) -> str:
    """What to do when the reference is neither cached nor downloadable. `book_metrics`: each metric's book
    names (a run logs one of them: the policy-gradient runs renamed theirs on 2026-05-03)."""
    csv_args = " ".join(f"{names[0].replace('/', '_')}.csv" for names in book_metrics[:2]) + " ..."
    charts = ", ".join(" or ".join(names) for names in book_metrics)
    cached = cache_path(spec).relative_to(REPO_ROOT)
    return "\n".join([f"To get the book's {spec.algorithm} run (wandb {spec.wandb_path}), do one of:",
                      "  1. On a machine that reaches wandb, run this same command once: it fetches the run",
                      f"     and caches it as {cached}. Copy that file into this checkout's",
                      "     reference_runs/ folder. (wandb.Api() may ask for an API key: `wandb login` with",
                      "     any free account reads public projects.)",
                      "  2. Or export the charts from the run's wandb page:", f"       {spec.wandb_url}",
                      f"     For each chart you want ({charts}):",
                      "     open the chart's '...' menu > Export / Download data > CSV, with the x-axis left",
                      "     on 'Step'. Then pass the files (several CSVs of one run are merged):",
                      f"       rlhf-recipes compare {run_arg} --reference {spec.algorithm} --reference-csv {csv_args}",
                      "     An API history saved with run.history().to_csv(...) works as well."])
