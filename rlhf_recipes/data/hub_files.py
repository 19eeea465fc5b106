"""A hub dataset read as its raw JSONL files, line by line, in file order.

For repos whose files do not share one schema, which `datasets.load_dataset` cannot merge into a
split: tasksource/PRM800K is four raw files (phase1_train, phase1_test, phase2_train, phase2_test)
and no config, so `load_dataset(hub_id, split="train")` joins phase 1 and phase 2; it takes its
features from phase 1, whose `question` lacks phase 2's `pre_generated_*` fields, and the phase-2
rows then fail to cast. The book's own PRM loader reads the phase files line by line for this reason.

Each file comes through the hub cache (`hf_hub_download`), so a second run, or a run with
HF_HUB_OFFLINE / HF_DATASETS_OFFLINE set, reads the cached copy and needs no network.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

from rlhf_recipes.data.base import DataError


def _download(hub_id: str, name: str, offline: bool) -> str | None:
    """The file's path in the hub cache (downloaded if need be); None if the repo has no such file."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError

    try:
        return hf_hub_download(hub_id, name, repo_type="dataset", local_files_only=offline)
    except LocalEntryNotFoundError:
        why = ("the hub is offline (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE)" if offline
               else "the Hugging Face hub cannot be reached")
        raise DataError(f"dataset `{hub_id}`: file {name} is not in the local hub cache and {why}; download it where "
                        f"the hub is reachable (hf download --repo-type dataset {hub_id} {name}) and "
                        "copy the cache, or give a local file with --data_files") from None
    except EntryNotFoundError:
        return None


def jsonl_rows(hub_id: str, filenames: tuple[str, ...]) -> Iterator[tuple[str, dict]]:
    """("<file> line N", row) for every line of each file in turn (1-based lines). `hub_id` may also be a local
    folder laid out as the repo. A file the repo does not have is skipped (a split may exist in one phase only);
    none of them, or one not cached while offline, is a DataError naming the files."""
    from rlhf_recipes.hub import hub_offline

    offline = hub_offline(datasets=True)
    found = False
    local = Path(hub_id)  # a copy of the repo on disk (hf download ... --local-dir), as datasets takes
    for name in filenames:
        if local.is_dir():
            path = local / name
            if not path.is_file():
                continue
        else:
            path = _download(hub_id, name, offline)
            if path is None:
                continue
        found = True
        with open(path, encoding="utf-8") as f:
            for line_number, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError as e:
                    raise DataError(f"dataset `{hub_id}`: {name} line {line_number} is not JSON ({e}); the cached "
                                    "file may be cut short: delete it from the hub cache and run again") from None
                yield f"{name} line {line_number}", row
    if not found:
        raise DataError(f"dataset `{hub_id}` has none of the files {', '.join(filenames)}; this source reads a repo "
                        "laid out as those files (check --dataset_name / --dataset_split)")
