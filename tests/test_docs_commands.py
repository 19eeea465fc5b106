"""The commands in README.md and docs/*.md work as written.

Which commands run: in fenced ```bash blocks, every line that uses `--profile tiny`, and every
line whose trailing comment says `# runs as written`. A comment may state the exit code the
command is expected to end with, e.g. `# runs as written (exit code 1: does not fit)`; otherwise
it must exit 0. A block right after the HTML comment `<!-- not run by tests/test_docs_commands.py:
REASON -->` is skipped as a whole (the comment says why).

They run in chains: a command that names a run under outputs/ runs after the
earlier command that writes it, in the same scratch folder (the README's tiny DPO run in
outputs/dpo-tiny is compared on the direct-alignment page and exported on the tools page: one
chain), and a command that reads every run under outputs/ (`rlhf-recipes runs`) joins the chain of
the latest run written on its page. Each chain is its own test, so parallel workers (pytest-xdist)
run the chains side by side; within a chain the commands keep document order. A chain's working
directory is a scratch folder holding links to the repository's recipes/ and accelerate_configs/,
so outputs/ lands there. The environment is offline: HF_HUB_OFFLINE=1, WANDB_MODE=offline, OMP_NUM_THREADS=1, and
PYTHONPATH points at this checkout.

Each command runs in this test's process, started as the shell would start it: `python FILE ARGS` runs FILE as
__main__, `python -m MODULE ARGS` runs MODULE as __main__, and `rlhf-recipes ARGS` runs the installed command's
own script (or `python -m rlhf_recipes.tools` without one), each with sys.argv as the shell would set it (shlex)
and its exit code taken from its SystemExit (an uncaught exception: exit 1, as python's; past TIMEOUT_S, a
TimeoutError: exit 1, as a process's timeout would fail). A fresh process per
command cost ~5 CPU-s of imports (torch, transformers, TRL) each, half of this test's time. What a command
changes in the process is put back after it: the working directory, the environment, sys.argv and sys.path, the
logging levels and handlers, the signal handlers, the warnings filters and torch's thread count. The processes a
command starts itself (a sweep's runs, the bad-input battery's cases, the console copier) are still real
processes, and so are the commands this cannot start in-process (anything but python and rlhf-recipes). That the
commands also start as processes of their own is shown by those (a sweep's runs are `python recipes/run.py`; the
bad-input battery starts each tool) and by tests/test_compare.py (the installed command).

Keep the runnable set small: each tiny run is seconds of CPU, and a command that starts runs as processes (a
sweep, a pipeline) pays ~5 CPU-s of imports for each.

The cheap checks below run nothing: every recipes/*.yaml named in the docs exists, every recipe
but an added algorithm's is named in README.md, every `rlhf-recipes <command>` named is a real command, and every local
link points at a file.
"""

from __future__ import annotations

import logging
import os
import re
import runpy
import shlex
import signal
import subprocess
import sys
import threading
import traceback
import warnings
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = ["README.md", "docs/setup.md", "docs/sft.md", "docs/direct_alignment.md", "docs/policy_gradients.md",
        "docs/rejection_sampling.md", "docs/sdpo.md", "docs/reward_models.md", "docs/pipelines.md", "docs/tools.md",
        "docs/nano.md", "docs/sweeps.md", "docs/overoptimization.md", "docs/reliability.md", "docs/evaluate.md",
        "docs/scale.md"]
RUNNABLE_MARK = "runs as written"
SKIP_BLOCK = "<!-- not run by tests/test_docs_commands.py"
TIMEOUT_S = 300


@dataclass(frozen=True)
class DocCommand:
    where: str  # file:line
    line: str  # the line as written
    argv: list[str]  # the command, comment removed
    expected_exit: int
    runnable: bool


def _doc_text(name: str) -> str:
    return (REPO / name).read_text(encoding="utf-8")


def bash_commands(name: str) -> list[DocCommand]:
    """Every command line of the file's ```bash blocks, in order."""
    commands: list[DocCommand] = []
    in_block = skip = False
    previous = ""
    pending = ""
    for number, line in enumerate(_doc_text(name).splitlines(), start=1):
        stripped = line.strip()
        if not in_block:
            if stripped.startswith("```bash"):
                in_block, skip = True, previous.startswith(SKIP_BLOCK)
            if stripped:
                previous = stripped
            continue
        if stripped.startswith("```"):
            in_block = False
            previous = stripped
            continue
        if skip or not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):  # a command continued on the next line
            pending += stripped[:-1] + " "
            continue
        full, pending = pending + stripped, ""
        argv = shlex.split(full, comments=True)
        comment = _comment(full)
        exit_code = re.search(r"exit code (\d+)", comment)
        commands.append(DocCommand(
            where=f"{name}:{number}", line=full, argv=argv,
            expected_exit=int(exit_code.group(1)) if exit_code else 0,
            runnable="--profile tiny" in " ".join(argv) or RUNNABLE_MARK in comment,
        ))
    assert not in_block, f"{name}: a ```bash block is not closed"
    return commands


def _comment(line: str) -> str:
    """The trailing `# ...` comment of a shell line (a # inside quotes is not one)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[i + 1:].strip()
    return ""


def runnable_commands() -> list[DocCommand]:
    return [c for name in DOCS for c in bash_commands(name) if c.runnable]


def _resolve(argv: list[str]) -> list[str]:
    program, rest = argv[0], argv[1:]
    if program == "python":
        return [sys.executable, *rest]
    if program == "rlhf-recipes":
        installed = Path(sys.executable).parent / "rlhf-recipes"
        return [str(installed), *rest] if installed.exists() else [sys.executable, "-m", "rlhf_recipes.tools", *rest]
    return argv


def test_runnable_commands_are_found():
    commands = runnable_commands()
    assert commands, "no runnable command found in the docs"
    first = commands[0]
    assert first.where.startswith("README.md") and "--profile tiny" in first.line, first
    for c in commands:
        assert c.argv[0] in ("python", "rlhf-recipes"), f"{c.where}: runs `{c.argv[0]}`, not python or rlhf-recipes"


def writes(command: DocCommand) -> str | None:
    """The run folder under outputs/ that a command writes: the one its comment names (`writes outputs/X`), its
    --output_dir, or the runner's default (outputs/<recipe>-<profile>; a sweep's under outputs/sweeps/)."""
    named = re.search(r"writes (outputs/\S+)", _comment(command.line))
    if named:
        return named.group(1).rstrip("/")
    argv = command.argv
    if "--output_dir" in argv:
        return argv[argv.index("--output_dir") + 1].rstrip("/")
    recipe = next((a for a in argv if a.startswith("recipes/") and a.endswith(".yaml")), None)
    if recipe is None or "--profile" not in argv:
        return None
    run = f"{Path(recipe).stem}-{argv[argv.index('--profile') + 1]}"
    if argv[:2] == ["python", "recipes/run.py"]:
        return f"outputs/{run}"
    if argv[:2] == ["rlhf-recipes", "sweep"]:
        return f"outputs/sweeps/{run}"
    return None


def reads(command: DocCommand) -> list[str]:
    """The run folders under outputs/ that a command names and does not write itself."""
    return [a.rstrip("/") for a in command.argv[1:] if a.startswith("outputs/") and a.rstrip("/") != writes(command)]


def _contains(outer: str, inner: str) -> bool:
    return inner == outer or inner.startswith(outer + "/") or outer.startswith(inner + "/")


def command_chains() -> list[list[DocCommand]]:
    """The runnable commands in chains (see the module's docstring), each in document order."""
    commands = runnable_commands()
    chain_of = list(range(len(commands)))  # union-find over command indexes

    def root(i: int) -> int:
        while chain_of[i] != i:
            i = chain_of[i]
        return i

    for i, command in enumerate(commands):
        earlier = [(j, writes(c)) for j, c in enumerate(commands[:i]) if writes(c)]
        needs = reads(command)
        for path in needs:
            writer = [j for j, written in earlier if _contains(written, path)]
            assert writer, f"{command.where}: `{command.line}` reads {path}, which no earlier command writes"
            chain_of[root(i)] = root(writer[-1])
        page = command.where.split(":")[0]
        if not needs and command.argv[:2] == ["rlhf-recipes", "runs"]:  # every run under outputs/
            same_page = [j for j, _ in earlier if commands[j].where.split(":")[0] == page]
            if same_page:
                chain_of[root(i)] = root(same_page[-1])
    chains: dict[int, list[DocCommand]] = {}
    for i, command in enumerate(commands):
        chains.setdefault(root(i), []).append(command)
    return sorted(chains.values(), key=lambda chain: commands.index(chain[0]))


def test_chains_cover_every_runnable_command_once_and_keep_the_readme_dpo_run_with_its_readers():
    chains = command_chains()
    flat = [c.where for chain in chains for c in chain]
    assert sorted(flat) == sorted(c.where for c in runnable_commands()) and len(set(flat)) == len(flat)
    readme_run = next(chain for chain in chains if chain[0].where.startswith("README.md"))
    assert any("outputs/dpo-tiny" in c.line and c.where.startswith("docs/") for c in readme_run), readme_run


def _in_process(argv: list[str]) -> tuple[list[str], Callable[[], object]] | None:
    """sys.argv and the start of `argv` as the shell would start it, in this process; None where that is not how
    it starts (a program other than python and rlhf-recipes, or a python option other than -m)."""
    program, rest = argv[0], argv[1:]
    if program == "python" and rest[:1] == ["-m"]:
        module = rest[1]
        return ["-m", *rest[2:]], lambda: runpy.run_module(module, run_name="__main__", alter_sys=True)
    if program == "python" and rest and not rest[0].startswith("-"):
        return rest, lambda: runpy.run_path(rest[0], run_name="__main__")
    if program == "rlhf-recipes":
        installed = Path(sys.executable).parent / "rlhf-recipes"
        if installed.exists():
            return [str(installed), *rest], lambda: runpy.run_path(str(installed), run_name="__main__")
        return ["-m", *rest], lambda: runpy.run_module("rlhf_recipes.tools", run_name="__main__", alter_sys=True)
    return None


def _exit_code(start: Callable[[], object]) -> int:
    """The exit code python gives a script that runs `start`'s code."""
    try:
        start()
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        print(e.code, file=sys.stderr)
        return 1
    except Exception:  # noqa: BLE001 - python prints any uncaught exception and exits 1: so does this
        traceback.print_exc()
        return 1
    return 0


@contextmanager
def _process_state_restored():
    """Whatever a command run in this process changes in it, put back when it ends. Loggers that the command's
    imports made are left as made: the same imports in a later process make them the same way."""
    import torch

    environ, argv, path, cwd, threads = dict(os.environ), sys.argv[:], sys.path[:], os.getcwd(), torch.get_num_threads()
    loggers = [logging.getLogger(), *(logger for logger in logging.Logger.manager.loggerDict.values()
                                      if isinstance(logger, logging.Logger))]
    levels = {logger: (logger.level, logger.handlers[:], logger.propagate) for logger in loggers}
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGHUP)}
    try:
        with warnings.catch_warnings():
            yield
    finally:
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(environ)
        sys.argv[:], sys.path[:] = argv, path
        for logger, (level, kept, propagate) in levels.items():
            logger.setLevel(level)
            logger.handlers[:] = kept
            logger.propagate = propagate
        for s, handler in handlers.items():
            signal.signal(s, handler)
        torch.set_num_threads(threads)


@contextmanager
def _time_limit(seconds: float):
    """subprocess.run's timeout, for a command run in this process: past `seconds` (then every 10 s, should the
    command catch it) a TimeoutError is raised in the main thread, which _exit_code turns into exit 1 with its
    traceback; without it a hung command would hold the test (and CI) forever. A signal sent to the main thread by a
    watcher thread, not an alarm(): it interrupts a blocking wait too, and a command's own alarm() (math_verify's
    timeouts) cannot cancel it."""
    def expire(signum, frame):
        raise TimeoutError(f"still running after {seconds:g} s (the time limit of a doc command)")

    done, main = threading.Event(), threading.main_thread().ident

    def watch():
        if not done.wait(seconds):
            signal.pthread_kill(main, signal.SIGUSR2)
            while not done.wait(10):
                signal.pthread_kill(main, signal.SIGUSR2)

    previous = signal.signal(signal.SIGUSR2, expire)
    watcher = threading.Thread(target=watch, name="doc-command-time-limit", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()
        signal.signal(signal.SIGUSR2, previous)


def run_command(command: DocCommand, cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    """Run a doc command in `cwd` with `env`; its exit code and its output (stdout then stderr, the end of it)."""
    started = _in_process(command.argv)
    if started is None:
        result = subprocess.run(_resolve(command.argv), cwd=cwd, env=env, capture_output=True, text=True,
                                timeout=TIMEOUT_S, check=False)
        return result.returncode, (result.stdout + result.stderr)[-4000:]
    argv, start = started
    with _process_state_restored():
        os.chdir(cwd)
        os.environ.update(env)
        sys.argv[:] = argv
        with _time_limit(TIMEOUT_S):
            return _exit_code(start), ""


def test_a_command_in_process_gives_the_exit_code_a_process_would_and_leaves_the_process_as_it_was(tmp_path, capfd):
    (tmp_path / "recipes").symlink_to(REPO / "recipes", target_is_directory=True)
    before = dict(os.environ), sys.argv[:], sys.path[:], os.getcwd(), signal.getsignal(signal.SIGINT)
    env = {**os.environ, "RLHF_RECIPES_DOCS_PROBE": "1"}
    for line, expected, said in [
        ("rlhf-recipes no-such-command", 2, "unknown command `no-such-command`"),  # main's return value
        ("rlhf-recipes plan", 2, "the following arguments are required: recipe"),  # argparse's SystemExit
        ("python recipes/run.py recipes/dpo.yaml --profile tiny --no_such_key 1", 2, "no_such_key"),
        ("python -m rlhf_recipes.tools --help", 0, "usage: rlhf-recipes"),
    ]:
        command = DocCommand(where="probe", line=line, argv=shlex.split(line), expected_exit=expected, runnable=True)
        assert run_command(command, tmp_path, env)[0] == expected, line
        captured = capfd.readouterr()
        assert said in captured.out + captured.err, (line, captured)
    assert (dict(os.environ), sys.argv, sys.path, os.getcwd(), signal.getsignal(signal.SIGINT)) == before
    assert not (tmp_path / "outputs").exists()  # the refused run left nothing


def test_a_command_in_process_that_runs_past_the_time_limit_exits_1_and_the_next_one_runs(tmp_path, monkeypatch,
                                                                                          capfd):
    """The in-process start keeps subprocess.run's timeout: a command still running at TIMEOUT_S ends with exit 1
    and says so, even inside a blocking wait, and nothing of the limit is left behind for the next command."""
    (tmp_path / "waits.py").write_text("import time\ntime.sleep(30)\n")
    (tmp_path / "quick.py").write_text("import time\ntime.sleep(0.5)\n")
    monkeypatch.setattr(sys.modules[__name__], "TIMEOUT_S", 0.3)
    before = signal.getsignal(signal.SIGUSR2)
    waits = DocCommand(where="probe", line="python waits.py", argv=["python", "waits.py"], expected_exit=1,
                       runnable=True)
    assert run_command(waits, tmp_path, dict(os.environ))[0] == 1
    assert "TimeoutError: still running after 0.3 s" in capfd.readouterr().err
    monkeypatch.setattr(sys.modules[__name__], "TIMEOUT_S", 5)
    quick = DocCommand(where="probe", line="python quick.py", argv=["python", "quick.py"], expected_exit=0,
                       runnable=True)
    assert run_command(quick, tmp_path, dict(os.environ))[0] == 0
    assert signal.getsignal(signal.SIGUSR2) == before


@pytest.mark.slow
@pytest.mark.parametrize("chain", command_chains(), ids=lambda chain: chain[0].where)
def test_doc_commands_run_as_written(chain, tmp_path, capfd):
    for folder in ("recipes", "accelerate_configs"):
        (tmp_path / folder).symlink_to(REPO / folder, target_is_directory=True)
    env = {
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "offline",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p),
    }
    for command in chain:
        code, output = run_command(command, tmp_path, {**os.environ, **env})
        captured = capfd.readouterr()
        output = output or (captured.out + captured.err)[-4000:]
        if code != command.expected_exit:
            pytest.fail(f"{command.where}: `{command.line}` exited {code}, expected {command.expected_exit}\n{output}")


def _all_docs_text() -> str:
    return "\n".join(_doc_text(name) for name in DOCS)


def test_named_recipes_exist_and_every_recipe_is_in_the_readme():
    """Every recipe the docs name exists, and the README's table names every recipe but an added algorithm's (one
    the book never ran: no facts in rlhf_recipes/book_reference.py), which a registry entry and its recipe make
    complete (README, "Adding an algorithm"); `python recipes/run.py --help` lists every algorithm."""
    from rlhf_recipes.book_reference import BOOK
    from rlhf_recipes.registry import ALGORITHMS

    named = set(re.findall(r"recipes/[A-Za-z0-9_]+\.yaml", _all_docs_text()))
    missing = sorted(p for p in named if not (REPO / p).exists())
    assert not missing, f"the docs name recipes that do not exist: {missing}"
    readme = _doc_text("README.md")
    added = {name for name in ALGORITHMS if name not in BOOK}
    unnamed = sorted(p.name for p in (REPO / "recipes").glob("*.yaml")
                     if f"recipes/{p.name}" not in readme and p.stem not in added)
    assert not unnamed, f"README.md does not name these recipes: {unnamed}"


def test_every_docs_page_is_checked():
    pages = {str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md")}
    assert pages <= set(DOCS), f"add these pages to DOCS (in reading order): {sorted(pages - set(DOCS))}"


def test_named_commands_exist():
    from rlhf_recipes.tools.cli import all_commands

    named = set(re.findall(r"rlhf-recipes[ ]+([a-z][a-z-]*)", _all_docs_text()))
    unknown = sorted(named - set(all_commands()))
    assert not unknown, f"the docs name `rlhf-recipes` commands that do not exist: {unknown}"


def test_local_links_exist():
    broken = []
    for name in DOCS:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", _doc_text(name)):
            if "://" in target:
                continue
            if not ((REPO / name).parent / target).exists():
                broken.append(f"{name}: {target}")
    assert not broken, f"broken links: {broken}"
