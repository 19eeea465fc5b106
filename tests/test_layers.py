"""The house's floors: recipes -> rlhf_recipes -> custom_losses -> rewards, and inside rlhf_recipes the files that
stand low (nano.py, data/) import nothing from the files that stand above them. Read from the source, no import
runs: a static check of `import` / `from ... import` statements anywhere in a file (function bodies included)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def reaches(files: list[Path], forbidden: tuple[str, ...]) -> list[str]:
    return sorted(f"{path.relative_to(REPO)} imports {name}" for path in files for name in imported_modules(path)
                  if name == forbidden or any(name == f or name.startswith(f + ".") for f in forbidden))


@pytest.mark.parametrize("folder, above", [
    ("rewards", ("custom_losses", "rlhf_recipes", "recipes")),
    ("custom_losses", ("rlhf_recipes", "recipes")),
    # The installed package never reaches the checkout's benchmarks (not installed), the recipes' entry point, or the
    # lab that stands beside it (its commands join through an entry point: lab/commands.py).
    ("rlhf_recipes", ("benchmarks", "recipes", "lab")),
    ("lab", ("benchmarks", "recipes")),
])
def test_packages_import_only_the_floors_below(folder, above):
    assert reaches(sorted((REPO / folder).rglob("*.py")), above) == []


@pytest.mark.parametrize("files, above", [
    # nano.py builds the nano model (floor 2): the data adapters and the registry stand above it.
    (["rlhf_recipes/nano.py"], ("rlhf_recipes.data", "rlhf_recipes.evaluation", "rlhf_recipes.registry",
                                "rlhf_recipes.config", "rlhf_recipes.families", "rlhf_recipes.tools")),
    # data/ builds rows, some by sampling a saved model (rlhf_recipes/generation.py), never through evaluation/.
    (sorted(str(p.relative_to(REPO)) for p in (REPO / "rlhf_recipes/data").glob("*.py")),
     ("rlhf_recipes.evaluation", "rlhf_recipes.families", "rlhf_recipes.tools", "rlhf_recipes.train")),
    # The ground floor imports nothing of the project but the one-prefill-per-prompt sampler (next test).
    (["rlhf_recipes/errors.py", "rlhf_recipes/hub.py", "custom_losses/policy_gradient/shared_prefill.py"],
     ("rlhf_recipes", "custom_losses", "rewards")),
    (["rlhf_recipes/generation.py"], ("rlhf_recipes", "rewards")),
])
def test_low_files_of_rlhf_recipes_do_not_reach_up(files, above):
    assert reaches([REPO / f for f in files], above) == []


def test_the_ground_floor_samples_through_a_leaf_of_the_floor_below():
    """generation.py's one import of the project: custom_losses' shared prefill, itself importing nothing of ours,
    so that the held-out sampler and the policy-gradient trainer prefill the same way and no loop can form."""
    generation = REPO / "rlhf_recipes/generation.py"
    assert [name for name in imported_modules(generation) if name.startswith(("rlhf_recipes", "custom_losses",
            "rewards"))] == ["custom_losses.policy_gradient.shared_prefill"]


def test_the_runner_never_names_the_lab():
    """The runner (rlhf_recipes, custom_losses, rewards) neither imports the lab nor names one of its modules in a
    string (`lab.sweep.cli:main` in the runner's command table would be an arrow up that no import shows)."""
    runner = [p for folder in ("rlhf_recipes", "custom_losses", "rewards") for p in sorted((REPO / folder).rglob("*.py"))]
    named = [f"{p.relative_to(REPO)}:{n}" for p in runner for n, line in enumerate(p.read_text().splitlines(), 1)
             if re.search(r"\blab[./]", line)]
    assert named == []


def test_the_core_never_names_the_tools():
    """The core (rlhf_recipes/ outside tools/) neither imports the tools nor names one of their modules in a string
    (a `python -m rlhf_recipes.tools.X` subprocess or an importlib call would be an arrow up that no import shows)."""
    core = [p for p in sorted((REPO / "rlhf_recipes").rglob("*.py")) if "tools" not in p.relative_to(REPO).parts[1:2]]
    assert len(core) > 50
    named = [f"{p.relative_to(REPO)}:{n}" for p in core for n, line in enumerate(p.read_text().splitlines(), 1)
             if "rlhf_recipes.tools" in line]
    assert named == []


def test_beta_reaches_the_loss_through_four_of_our_files(tmp_path):
    """A recipe value's path is short (issue 35: 11 files in the first design): `beta` from recipes/dpo.yaml is read
    and layered (config.py), converted (config_schema.py), range-checked (validation.py) and handed to the DPO config
    class (custom_losses/schedules.py), whose TRL loss reads it. Measured on a real one-step run by
    `python -m benchmarks.value_path`; the other files on its trace only carry the whole config (writers, hashes)."""
    from benchmarks.value_path import trace

    path = trace("beta", ["recipes/dpo.yaml", "--profile", "tiny", "--max_steps", "1", "--report_to", "none",
                          "--output_dir", str(tmp_path / "dpo")])
    handled = [file for file, functions in path.items() if "value" in functions.values()]
    assert handled == ["rlhf_recipes/config.py", "rlhf_recipes/config_schema.py", "rlhf_recipes/validation.py"]
    assert "custom_losses/schedules.py" in path  # ScheduledDPOConfig.__post_init__ holds it: the class TRL reads
    assert not any(file.startswith(("rlhf_recipes/families/", "rlhf_recipes/registry")) for file in handled)


def module_of(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def file_edges(path: Path, modules: set[str]) -> set[str]:
    """The modules of ours that a file imports: `from pkg import sub` names the submodule when there is one."""
    edges = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            edges.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            subs = {f"{node.module}.{alias.name}" for alias in node.names} & modules
            edges.update(subs or {node.module})
    return edges & modules


def test_no_two_files_of_ours_import_each_other_in_a_loop():
    """0 circles: a loop of imports (function bodies included) means two files that are one concern, or a fact in
    the wrong one of them (evaluation/base.py <-> loading.py once held EvalOptions in base.py)."""
    import networkx

    files = [p for folder in ("rlhf_recipes", "custom_losses", "rewards", "lab") for p in (REPO / folder).rglob("*.py")]
    modules = {module_of(p) for p in files}
    graph = networkx.DiGraph((module_of(p), target) for p in files for target in file_edges(p, modules)
                             if target != module_of(p))
    # A package's __init__ that hands its submodules' names on is a face, not a room: drop the edge back into it.
    graph.remove_edges_from([(a, b) for a, b in list(graph.edges) if a.startswith(b + ".")])
    loops = [sorted(c) for c in networkx.strongly_connected_components(graph) if len(c) > 1]
    assert loops == [], loops
