"""Shared helpers: run a recipe in this process (fast) or as real processes (accelerate, gloo).

Also how the suite runs on several workers (pytest-xdist, `-n 2 --dist loadgroup` in CI): the builds (tiny, the nano
bases) live in one cache folder that every worker of a run shares, each built once under its file lock; tests that
launch several processes form one xdist group (one worker runs them one after another, so two launches never share
the two cores at once); tests that share a module-scoped run form their module's group (the run is made once)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RECIPES = ROOT / "recipes"
sys.path.insert(0, str(ROOT))

# Tests never reach a network: fail fast instead of waiting on the hub or wandb.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The tiny model's matrices are too small to gain from threads; on a shared 2-core machine two
# torch threads per process make it many times slower (and a subprocess inherits this).
os.environ.setdefault("OMP_NUM_THREADS", "1")


def setting_of(recipe, key: str):
    """A recipe's value of `key` as a run reads it: ours and the model's from their built configs, the trainer's
    through recipe.setting (the real recipes' bf16 config cannot be built on a CPU machine)."""
    built = {"recipe": recipe.args, "model": recipe.model}.get(recipe.group_of(key))
    return getattr(built, key) if built is not None else recipe.setting(key)


def run_recipe(recipe: str | Path, output_dir: Path, *extra: str, expect: int = 0) -> dict:
    """Run `recipes/run.py RECIPE --profile tiny --output_dir OUT EXTRA...` in this process.

    Returns final_results.json (or {} when the run was expected to fail).
    """
    argv = [str(RECIPES / recipe) if not Path(recipe).is_absolute() else str(recipe),
            "--profile", "tiny", "--output_dir", str(output_dir), *extra]
    from rlhf_recipes.train import main

    code = main(argv)
    assert code == expect, f"run.py {' '.join(argv)} exited {code}, expected {expect}"
    path = output_dir / "final_results.json"
    return json.loads(path.read_text()) if path.exists() else {}


def resume_copy(finished: Path, copy: Path, step: int) -> dict:
    """Copy a finished run without its later checkpoints and resume the copy from checkpoint-STEP.

    The finished run is the uninterrupted reference the resumed one is compared with."""
    import shutil

    later = [p.name for p in finished.glob("checkpoint-*") if int(p.name.split("-")[1]) > step]
    shutil.copytree(finished, copy, ignore=shutil.ignore_patterns(*later))
    return run_recipe(copy / "config.yaml", copy, "--resume", str(copy / f"checkpoint-{step}"))


def losses_after(run: Path, step: int) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in read_metrics(run) if "loss" in r and r["step"] > step}


def read_metrics(output_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def low_token_fraction(completions, completion_ids=None, **kwargs):
    """A reward a 2-layer model can learn from scratch: the share of its tokens with a low id.

    The learning-signal tests (GRPO, PPO) register it to check that the whole loop is wired right.
    """
    return [sum(t < 384 for t in ids) / max(len(ids), 1) for ids in completion_ids]


def free_port() -> int:
    """A TCP port nothing listens on now (the OS picks it): a launch's MASTER_PORT, distinct across parallel workers.
    A port from the pid (29500 + pid % 1000) collided whenever two workers' pids agreed modulo 1000."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def assert_base_unmoved(base: Path, measured: float, test: str) -> None:
    """Before a learning test's floor: the base it was measured from is the base it runs on. A base's build records
    its own held-out exact match (rlhf_recipes/evaluation/target.py, RECORD beside the model); when a change to the
    base's recipe or build moves it, the failure says so, instead of blaming the algorithm for a floor measured on
    another base."""
    from rlhf_recipes.evaluation.target import RECORD

    built = json.loads((base / RECORD).read_text())
    assert built["value"] == pytest.approx(measured, abs=1e-9), (
        f"the base moved: {base.name} now scores {built['value']:.1%} held-out {built['metric']} (its build's own "
        f"measurement), and {test}'s floor was measured from a base at {measured:.1%}. Re-measure the spread over "
        f"3 training seeds on the new base (its docstring says how) and set the floor and this number from it.")


def launch(config: str, recipe: str, output_dir: Path, *extra: str, timeout: int = 600,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Real multi-process run: `accelerate launch --config_file accelerate_configs/cpu/CONFIG recipes/run.py ...`
    (`env`: variables set for it on top of this process's)."""
    env = {**os.environ, **(env or {}), "OMP_NUM_THREADS": "1", "MASTER_PORT": str(free_port())}
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
           str(ROOT / "accelerate_configs" / "cpu" / config), "--main_process_port", env["MASTER_PORT"],
           str(RECIPES / "run.py"), str(RECIPES / recipe), "--profile", "tiny", "--output_dir", str(output_dir), *extra]
    result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{' '.join(cmd)}\n--- stdout\n{result.stdout[-4000:]}\n--- stderr\n{result.stderr[-6000:]}"
    return result


def launch_machines(config: str, recipe: str, output_dir: Path, *extra: str, machines: int = 2,
                    timeout: int = 600) -> None:
    """A multi-node launch on localhost: one `accelerate launch --machine_rank R` per "machine", all at once,
    meeting at 127.0.0.1 (the config sets num_machines and the total num_processes), as SLURM starts them.
    Logs go to OUTPUT_DIR.machine-R.log; when one machine fails the others are stopped, not left waiting."""
    import time

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    port = str(free_port())
    running = []
    for rank in range(machines):
        cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
               str(ROOT / "accelerate_configs" / "cpu" / config), "--machine_rank", str(rank),
               "--main_process_ip", "127.0.0.1", "--main_process_port", port,
               str(RECIPES / "run.py"), str(RECIPES / recipe), "--profile", "tiny", "--output_dir", str(output_dir),
               *extra]
        log = Path(f"{output_dir}.machine-{rank}.log")
        with open(log, "w") as handle:
            running.append((cmd, log, subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=handle,
                                                       stderr=subprocess.STDOUT)))
    deadline = time.monotonic() + timeout
    try:
        while any(p.poll() is None for _, _, p in running):
            if any(p.poll() not in (None, 0) for _, _, p in running) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    finally:
        for _, _, proc in running:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for cmd, log, proc in running:
        assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}\n{log.read_text()[-6000:]}"


MULTIPROCESS_GROUP = "multiprocess"
SLOW_FIXTURES = ("nano_base", "nano_sdpo_base")  # a test that needs a nano base trains or evaluates on it: slow


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config, items):
    """Marks derived from what a test uses, so that no test file has to remember them:

    - `slow` on every `multiprocess` test and every test that uses a nano base (the quick tier, -m "not slow",
      leaves them out);
    - xdist groups (for `--dist loadgroup`): the multiprocess tests form one group, so a worker runs them one after
      another and two 2-process launches never share the two cores; the tests of a module that share a run made by a
      module- or class-scoped fixture form that module's group, so the run is made once, not once per worker. A
      module whose shared run a multiprocess test also uses joins the multiprocess group (one group per test).
    """
    def shared_fixtures(item) -> set[str]:
        info = getattr(item, "_fixtureinfo", None)
        defs = info.name2fixturedefs.items() if info else ()
        return {name for name, fixturedefs in defs if fixturedefs[-1].scope in ("module", "class")}

    modules_with_multiprocess_sharing = {item.module.__name__ for item in items
                                         if item.get_closest_marker("multiprocess") and shared_fixtures(item)}
    for item in items:
        multiprocess = item.get_closest_marker("multiprocess") is not None
        if multiprocess or any(name in getattr(item, "fixturenames", ()) for name in SLOW_FIXTURES):
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("xdist_group"):
            continue  # the test file chose
        if multiprocess or (shared_fixtures(item) and item.module.__name__ in modules_with_multiprocess_sharing):
            item.add_marker(pytest.mark.xdist_group(MULTIPROCESS_GROUP))
        elif shared_fixtures(item):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker and getattr(config.option, "loadgroup", False):  # xdist sets it in a worker of `--dist loadgroup`
        groups = {item.nodeid: str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
                  for item in items for mark in [item.get_closest_marker("xdist_group")] if mark}
        (Path(config.option.basetemp).parent / f"xdist-groups-{worker}.json").write_text(json.dumps(groups))


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # before xdist's own (the first answer is used); xdist optional
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadgroup` that keeps the groups with pytest >= 9.2: xdist 3.8 groups by a suffix it writes into each
    test's nodeid (`item._nodeid`), which pytest 9.2's structured node ids no longer read, so every group was split
    across the workers. Here the workers write the group of each test (above) into the run's basetemp, and the
    controller's scheduler reads it back; a suffix that a later xdist writes still works (the parent class)."""
    if config.getoption("dist", "no") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class GroupFileScheduling(LoadGroupScheduling):
        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:  # the workers have all collected (and written) by the time the scheduler splits
                self.groups = {}
                for written in config._tmp_path_factory.getbasetemp().glob("xdist-groups-*.json"):
                    self.groups.update(json.loads(written.read_text()))
            return self.groups.get(nodeid) or super()._split_scope(nodeid)

    return GroupFileScheduling(config, log)


def shared_tmp(tmp_path_factory) -> Path:
    """A folder every worker of this test run shares: under xdist a worker's basetemp is <the run's basetemp>/popen-gwN."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session", autouse=True)
def _tiny_cache(tmp_path_factory, request):
    """One tiny model build per test run, in a cache folder shared by the run's workers unless one is given.

    The nano bases this run's tests ask for start building at once in a second process (below), on the core that
    the tests leave idle at first; one worker starts it (gw0, or the only process without xdist) and the others
    wait on the build's file lock. Without xdist it is stopped if the session ends first; under xdist the worker that
    started it waits for it at its end (a test on another worker still needs it), unless the run is stopping."""
    import torch

    torch.set_num_threads(1)
    shared = shared_tmp(tmp_path_factory)
    if "RLHF_RECIPES_CACHE" not in os.environ:
        (shared / "rlhf-cache").mkdir(exist_ok=True)
        os.environ["RLHF_RECIPES_CACHE"] = str(shared / "rlhf-cache")
    prebuild = None
    if os.environ.get("PYTEST_XDIST_WORKER", "gw0") == "gw0":
        prebuild = _start_nano_prebuild(request.session.items, shared / "nano-prebuild.log")
    from rlhf_recipes.tiny import tiny_model_path

    yield tiny_model_path()
    if prebuild is not None and prebuild.poll() is None:
        session = request.session
        if os.environ.get("PYTEST_XDIST_WORKER") and not (session.shouldstop or session.shouldfail):
            prebuild.wait()  # a test on another worker still waits for it: stopped, it would restart from scratch there
        else:
            os.killpg(prebuild.pid, signal.SIGTERM)  # its SFT subprocess too (its own process group)
            prebuild.wait()


NANO_FIXTURES = {"nano_base": "nano_model_path", "nano_sdpo_base": "nano_sdpo_model_path"}


def _start_nano_prebuild(items, log_path: Path) -> subprocess.Popen | None:
    """Build the nano bases that these tests need in a background process, so that a CI run (one single-threaded
    test process on a 2-core machine) trains them on the idle core while the tests before the first nano test run:
    about 1 min (nano) + 3 min (nano-sdpo) of one core, which the session otherwise waited for. A checkout that ships
    today's bases (reference_runs/nano/bases/, tests/test_nano.py checks they are current) trains none: the process
    finds them and exits in seconds. The fixtures below wait on rlhf_recipes/nano.py's file lock and reuse the
    build: the same build, by the same code, as without this. Not niced: a niced build that a fixture waits for
    would crawl on a machine shared with other work, and in CI it is done within the first few minutes, before most
    multi-process tests (test_multinode, test_scale, ...) start."""
    wanted = {name for item in items for name in getattr(item, "fixturenames", ()) if name in NANO_FIXTURES}
    if not wanted:
        return None
    build = NANO_FIXTURES["nano_sdpo_base" if "nano_sdpo_base" in wanted else "nano_base"]  # sdpo builds nano first
    with open(log_path, "w") as log:  # a failed build raises again, with its log, in the fixture that needs it
        return subprocess.Popen([sys.executable, "-c", f"from rlhf_recipes.nano import {build}; {build}()"],
                                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


@pytest.fixture(scope="session")
def nano_base() -> Path:
    """The nano SFT base (recipes/nano_sft.yaml): the shipped one, else built once per cache (by the prebuild)."""
    from rlhf_recipes.nano import nano_model_path

    return Path(nano_model_path())


@pytest.fixture(scope="session")
def nano_sdpo_base(nano_base) -> Path:
    """nano-sdpo (recipes/nano_sdpo_sft.yaml): nano taught to read SDPO's teacher prompt."""
    from rlhf_recipes.nano import nano_sdpo_model_path

    return Path(nano_sdpo_model_path())
