"""What the docs say ships, and what they say compare offers, is so; no shipped file carries a path of the machine
it was made on. Cheap: reads files and the registry, runs nothing."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "reference_runs").rglob("*.md"))]
SHIPPED = ("reference_runs", "docs", "recipes")
# A wandb run id: 8 lowercase letters and digits, at least one of each (the book's ids all have a digit).
RUN_ID = re.compile(r"\b(?=[a-z0-9]*\d)(?=[a-z0-9]*[a-z])[a-z0-9]{8}\b")
NOT_RUN_IDS = {"bfloat16"}
# A path of the repository named in prose: starts with one of its top folders.
REPO_PATH = re.compile(r"(?<![\w/.~-])((?:recipes|rlhf_recipes|custom_losses|rewards|reference_runs|docs|tests|"
                       r"accelerate_configs)/[A-Za-z0-9_./-]*)")
# An absolute path of a home or temporary folder: /root/..., /home/<user>/..., /tmp/...
MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:root|home/[^/\s\"']+|tmp)/")


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def test_every_run_id_the_docs_name_is_offered_by_compare():
    from rlhf_recipes.tools.compare.references import SPECS

    offered = {spec.run_id: spec for spec in SPECS.values() if spec.run_id}
    named = {(m, page.relative_to(REPO).as_posix()) for page in PAGES for m in RUN_ID.findall(_text(page))
             if m not in NOT_RUN_IDS}
    assert named, "no run id found: the pattern is wrong"
    unknown = sorted(f"{page}: {run}" for run, page in named if run not in offered)
    assert not unknown, f"run ids the docs name but the registry (compare) does not hold: {unknown}"
    # Offered means compared: the run's algorithm maps at least one of the book's metrics onto ours.
    unmapped = sorted(f"{run} ({offered[run].algorithm})" for run, _ in named if not offered[run].metrics)
    assert not unmapped, f"compare holds these runs but maps none of their metrics: {unmapped}"


def _is_not_a_file_name(path: str) -> bool:
    """Names in the docs that look like paths but are not files: metric names (rewards/<name>/mean,
    rewards/margins: TRL's keys), and the caches compare writes when it fetches (reference_runs/<algo>-<id>.csv)."""
    if path.startswith("rewards/") and not (path.endswith(".py") or (REPO / path).is_dir()):
        return True
    return bool(re.fullmatch(r"reference_runs/[a-z_]+-[a-z0-9]{8}\.(csv|source\.json)", path))


def test_every_file_or_folder_the_docs_name_exists():
    missing = []
    for page in PAGES:
        text = _text(page)
        for match in REPO_PATH.finditer(text):
            path = match.group(1).rstrip(".,:;")
            if text[match.end():match.end() + 1] in ("<", "*", "{") or _is_not_a_file_name(path):  # a pattern
                continue
            if not ((REPO / path).exists() or (page.parent / path).exists()):
                missing.append(f"{page.relative_to(REPO)}: {path}")
    assert not missing, f"the docs name files or folders that do not exist: {sorted(set(missing))}"


def test_no_shipped_file_holds_a_home_or_temporary_path():
    found = []
    for folder in SHIPPED:
        for path in sorted((REPO / folder).rglob("*")):
            if not path.is_file() or path.suffix in (".png", ".sqlite", ".safetensors", ".pyc"):
                continue
            for number, line in enumerate(_text(path).splitlines(), 1):
                if MACHINE_PATH.search(line):
                    found.append(f"{path.relative_to(REPO)}:{number}: {MACHINE_PATH.search(line).group(0)}")
    assert not found, f"absolute paths of a home or temporary folder (write them relative): {found[:20]}"


def test_the_patterns_catch_what_they_are_for():
    assert MACHINE_PATH.search('"output_dir": "/tmp/nb/sapo"') and MACHINE_PATH.search("/home/ann/x")
    assert MACHINE_PATH.search("/root/.cache") and not MACHINE_PATH.search("~/.cache/rlhf-recipes and a/tmp/b")
    assert RUN_ID.findall("grpo (vjp7lgdi), 5s29syo6, orpo") == ["vjp7lgdi", "5s29syo6"]


def test_the_bad_input_count_the_docs_state_is_the_batterys():
    """docs/setup.md and docs/tools.md say how many mistakes `python -m benchmarks.bad_inputs` tries: the battery's size."""
    from benchmarks.bad_inputs import CASES

    stated = {int(n) for page in ("docs/setup.md", "docs/tools.md")
              for n in re.findall(r"(\d+) (?:such mistakes|mistakes a user makes|cases, another checkout)",
                                  _text(REPO / page))}
    assert stated == {len(CASES)}, stated
