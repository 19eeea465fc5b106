"""Bad inputs, tried as a user would: what each one gives, and how long until it says so.

    python -m benchmarks.bad_inputs                      # every case against this checkout
    python -m benchmarks.bad_inputs --repo ../old-main   # the same cases against another checkout (before/after)
    python -m benchmarks.bad_inputs --only data --json errors.json

Each case runs `python <repo>/recipes/run.py ...`, or for the tools `python -m rlhf_recipes.tools COMMAND ...`
(what `rlhf-recipes COMMAND` runs), as its own process (as a user would) in a scratch folder, and is judged from
its exit code and stderr:
  clear      exit 2 (or the stated code), exactly one `error:` line (argparse's `PROG: error:` counts), no
             traceback
  traceback  a Python traceback reached the user
  silent     exit 0: the mistake was not noticed
  unclear    any other failure (a message, but not one line, or a wrong exit code)
`seconds` is the wall time from start to exit: for a clear error, the time-to-error.

A few cases need more than files: `setup` builds what they point at (a checkpoint damaged in place, a run folder
whose config.yaml was edited by hand), and `hold` first starts a real run into a folder and waits until it has
saved a checkpoint, so that the case is a second process starting into a running folder (the holder is stopped
after the case).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

GOOD_ROW = {"prompt": "Hi?", "chosen": [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Hello."}],
            "rejected": [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Go away."}]}


@dataclass(frozen=True)
class Case:
    group: str
    name: str
    argv: tuple[str, ...]  # after `recipes/run.py` (or the tool's name); {r} = the repo's recipes/, {s} = scratch
    expect: int = 2  # the exit code of a clear report
    tool: str | None = None  # an `rlhf-recipes` command (evaluate, compare, ...) instead of recipes/run.py
    setup: Callable[[Path, Path], None] | None = None  # (repo, scratch) -> builds what the case points at
    hold: str | None = None  # a run folder ({s}/...) that a real run is writing into while the case starts
    timeout: int | None = None  # seconds, where the default would be far too long (a case that never ends)
    port_held: bool = False  # a socket listens on a free port, {p} in argv, while the case runs
    lock_held: str | None = None  # a run folder ({s}/...) whose run lock a live process holds (no training)
    pythonpath: str | None = None  # a folder ({s}/...) put first on the case's PYTHONPATH (a faked package)
    says: str | None = None  # what the report must name to be clear (not another error met on the way)


def _tiny(recipe: str, *extra: str) -> tuple[str, ...]:
    return (f"{{r}}/{recipe}", "--profile", "tiny", "--output_dir", "{s}/out", *extra)


def _tool(group: str, name: str, command: str, *argv: str) -> Case:
    return Case(group, name, argv, tool=command)


def _damaged_checkpoints(repo: Path, scratch: Path) -> None:
    """{s}/damaged: checkpoints 2 and 4 that transformers finished (trainer_state.json), each with its weights'
    header overwritten since (the same size)."""
    import numpy as np
    from safetensors.numpy import save_file

    for step in (2, 4):
        folder = scratch / "damaged" / f"checkpoint-{step}"
        folder.mkdir(parents=True)
        save_file({"w": np.zeros(64, dtype=np.float32)}, folder / "model.safetensors")
        data = bytearray((folder / "model.safetensors").read_bytes())
        data[:8] = b"\xff" * 8
        (folder / "model.safetensors").write_bytes(bytes(data))
        (folder / "trainer_state.json").write_text("{}")


def _edited_config(repo: Path, scratch: Path) -> None:
    """{s}/edited: a tiny DPO run folder with a checkpoint saved at beta 0.1, then config.yaml edited to 0.5."""
    import json

    import numpy as np
    from safetensors.numpy import save_file

    from rlhf_recipes.checkpoints import RECORD
    from rlhf_recipes.config import load_recipe
    from rlhf_recipes.run_folder import write_config
    from rlhf_recipes.run_setup import RunFolder, record_settings

    out = scratch / "edited"
    recipe = load_recipe([str(repo / "recipes" / "dpo.yaml"), "--profile", "tiny", "--output_dir", str(out)],
                         construct=False)
    write_config(recipe, out)
    checkpoint = out / "checkpoint-2"
    checkpoint.mkdir()
    save_file({"w": np.zeros(64, dtype=np.float32)}, checkpoint / "model.safetensors")
    record = record_settings(RunFolder(out, resolved=dict(recipe.resolved)))
    (checkpoint / "trainer_state.json").write_text(json.dumps({"stateful_callbacks": {RECORD: {"args": record}}}))
    config = out / "config.yaml"
    config.write_text(config.read_text().replace("\nbeta: 0.1\n", "\nbeta: 0.5\n"))


def _broken_gradio(repo: Path, scratch: Path) -> None:
    """{s}/fake-site/gradio: a package whose import fails as an absent one does (an install without the extra)."""
    package = scratch / "fake-site" / "gradio"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'gradio'\", name='gradio')\n")


def _finished_sweep(repo: Path, scratch: Path) -> None:
    """{s}/finished-sweep: a one-cell, one-seed sweep whose run finished and logged loss only."""
    from lab.sweep import spec, state

    folder = scratch / "finished-sweep"
    folder.mkdir()
    state.save(spec.SweepSpec(recipe=str(repo / "recipes" / "dpo.yaml"), profile="tiny", grid={"beta": ["0.1"]},
                              seeds=[0]), folder)
    run = folder / "beta=0.1" / "seed-0"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("algorithm: dpo\n")
    (run / "final_results.json").write_text(json.dumps({"status": "finished", "final_metrics": {"loss": 0.5}}))


CASES: tuple[Case, ...] = (
    # The recipe and the command line
    Case("recipe", "unknown option on the command line", _tiny("dpo.yaml", "--learnig_rate", "1e-6")),
    Case("recipe", "unknown key in the YAML", ("{s}/typo.yaml", "--profile", "tiny")),
    Case("recipe", "wrong type on the command line", _tiny("dpo.yaml", "--learning_rate", "fast")),
    Case("recipe", "unknown algorithm", ("{s}/algo.yaml",)),
    Case("recipe", "no algorithm key", ("{s}/noalgo.yaml",)),
    Case("recipe", "recipe file missing", ("{s}/missing.yaml",)),
    Case("recipe", "recipe is a list, not a mapping", ("{s}/list.yaml",)),
    Case("recipe", "YAML syntax error", ("{s}/syntax.yaml",)),
    Case("recipe", "key set twice in the YAML", ("{s}/twice.yaml", "--profile", "tiny")),
    Case("recipe", "unknown profile", _tiny("dpo.yaml")[:1] + ("--profile", "huge")),
    Case("recipe", "stray positional argument", _tiny("dpo.yaml", "extra")),
    Case("recipe", "effective batch not divisible", _tiny("dpo.yaml", "--effective_batch_size", "5")),
    Case("recipe", "accumulation contradicts the effective batch", _tiny("dpo.yaml", "--gradient_accumulation_steps", "7")),
    Case("recipe", "a flag without its value", _tiny("dpo.yaml", "--learning_rate"), says="needs a value"),
    Case("recipe", "a KL coefficient DAPO's loss does not read", _tiny("dapo.yaml", "--beta", "0.04"),
         says="no KL term"),
    Case("recipe", "label smoothing TRL's DPO loss ignores", _tiny("dpo.yaml", "--label_smoothing", "0.1"),
         says="cdpo.yaml"),
    # Numbers out of range
    Case("numbers", "learning rate 0", _tiny("dpo.yaml", "--learning_rate", "0")),
    Case("numbers", "negative learning rate", _tiny("dpo.yaml", "--learning_rate", "-1e-5")),
    Case("numbers", "negative beta", _tiny("dpo.yaml", "--beta", "-0.1")),
    Case("numbers", "max_steps 0", _tiny("dpo.yaml", "--max_steps", "0")),
    Case("numbers", "batch size 0", _tiny("dpo.yaml", "--per_device_train_batch_size", "0")),
    Case("numbers", "0 epochs", _tiny("dpo.yaml", "--num_train_epochs", "0", "--max_steps", "-1")),
    Case("numbers", "eval fraction 1.5", _tiny("preference_rm.yaml", "--eval_fraction", "1.5")),
    Case("numbers", "negative warmup", _tiny("dpo.yaml", "--warmup_steps", "-3")),
    Case("numbers", "cDPO label smoothing 0.7", _tiny("cdpo.yaml", "--label_smoothing", "0.7")),
    Case("numbers", "temperature 0", _tiny("grpo.yaml", "--temperature", "0")),
    Case("numbers", "top_p 1.5", _tiny("grpo.yaml", "--top_p", "1.5")),
    Case("numbers", "clip range 0", _tiny("grpo.yaml", "--epsilon", "0")),
    Case("numbers", "GAE lambda 1.2", _tiny("ppo.yaml", "--lam", "1.2")),
    Case("numbers", "num_samples 0", _tiny("dpo.yaml", "--num_samples", "0")),
    Case("numbers", "seed beyond 2**32-1", _tiny("dpo.yaml", "--seed", "4294967296")),
    Case("numbers", "LoRA rank 0", _tiny("dpo.yaml", "--use_peft", "true", "--lora_r", "0")),
    Case("numbers", "max_length 1e8, past the model's positions", _tiny("dpo.yaml", "--max_length", "1e8")),
    # Data
    Case("data", "data file missing", _tiny("dpo.yaml", "--data_files", "{s}/nope.jsonl")),
    Case("data", "data file empty", _tiny("dpo.yaml", "--data_files", "{s}/empty.jsonl")),
    Case("data", "data file not JSON", _tiny("dpo.yaml", "--data_files", "{s}/notjson.jsonl")),
    Case("data", "column missing", _tiny("dpo.yaml", "--data_files", "{s}/nocolumn.jsonl")),
    Case("data", "column of the wrong type", _tiny("dpo.yaml", "--data_files", "{s}/wrongtype.jsonl")),
    Case("data", "dataset adapter misspelt", _tiny("dpo.yaml", "--dataset", "ultrafedback")),
    Case("data", "malformed JSON at line 300", _tiny("dpo.yaml", "--data_files", "{s}/bad300.jsonl")),
    Case("data", "file cut off mid-line", _tiny("dpo.yaml", "--data_files", "{s}/cut.jsonl")),
    Case("data", "empty chosen at line 300", _tiny("dpo.yaml", "--data_files", "{s}/empty300.jsonl")),
    Case("data", "non-UTF-8 bytes at line 300", _tiny("dpo.yaml", "--data_files", "{s}/latin1.jsonl")),
    Case("data", "a CSV given as JSONL", _tiny("dpo.yaml", "--data_files", "{s}/table.jsonl")),
    # Models
    Case("models", "model folder missing", _tiny("dpo.yaml", "--model_name_or_path", "./no/such/model")),
    Case("models", "empty model folder", _tiny("dpo.yaml", "--model_name_or_path", "{s}/empty-model")),
    Case("models", "model folder without weights", _tiny("dpo.yaml", "--model_name_or_path", "{s}/config-only")),
    Case("models", "model folder without tokenizer", _tiny("dpo.yaml", "--model_name_or_path", "{s}/no-tokenizer")),
    Case("models", "load_in_4bit without LoRA", _tiny("dpo.yaml", "--load_in_4bit", "true")),
    Case("models", "LoRA target module the model lacks", _tiny("dpo.yaml", "--use_peft", "true",
                                                                 "--lora_target_modules", "q_proj,query_key_value")),
    Case("models", "GRPO prompt + completion past the model's positions", _tiny("grpo.yaml",
                                                                                "--max_completion_length", "2040")),
    Case("models", "hub model not cached, offline", _tiny("dpo.yaml", "--model_name_or_path", "nobody/not-a-model")),
    # Rewards
    Case("rewards", "reward function misspelt", _tiny("grpo.yaml", "--reward_funcs", "correctnes_reward")),
    Case("rewards", "rm: reward model missing", _tiny("hh_grpo.yaml", "--reward_funcs", "rm:{s}/no-rm")),
    Case("rewards", "reward weights of the wrong length", _tiny("grpo.yaml", "--reward_weights", "1,2,3,4,5")),
    # Runs
    Case("runs", "second run into a folder that holds one", _tiny("dpo.yaml", "--output_dir", "{s}/existing")),
    Case("runs", "--resume with no checkpoint", _tiny("dpo.yaml", "--resume")),
    Case("runs", "--resume and --overwrite together", _tiny("dpo.yaml", "--resume", "--overwrite")),
    Case("runs", "--resume at a folder that is no checkpoint", _tiny("dpo.yaml", "--resume", "{s}")),
    Case("runs", "second process starting into a running folder (--resume)", ("{s}/busy/config.yaml", "--resume"),
         hold="{s}/busy", timeout=120),
    Case("runs", "--resume, every checkpoint damaged in place (same size, its header overwritten)",
         _tiny("dpo.yaml", "--output_dir", "{s}/damaged", "--resume"), setup=_damaged_checkpoints),
    Case("runs", "--resume after config.yaml was edited by hand", ("{s}/edited/config.yaml", "--resume"),
         setup=_edited_config, timeout=120),
    Case("runs", "output_dir that cannot be written (a file in the way)", _tiny("dpo.yaml", "--output_dir",
                                                                              "{s}/afile/run")),
    Case("runs", "learning rate 1e30 (NaN weights): failed, last good checkpoint kept",
         _tiny("dpo.yaml", "--output_dir", "{s}/nan", "--learning_rate", "1e30", "--max_steps", "4"), expect=1),
    Case("runs", "learning rate 10 (divergence), stop on health", _tiny("dpo.yaml", "--output_dir", "{s}/diverge",
                                                                        "--learning_rate", "10", "--max_steps", "8",
                                                                        "--stop_on_health_warning"), expect=3),
    # The tools (rlhf-recipes COMMAND), on what a user points them at
    _tool("tools", "evaluate: run folder missing", "evaluate", "{s}/no-run"),
    _tool("tools", "evaluate: a folder without a model", "evaluate", "{s}/existing"),
    _tool("tools", "evaluate: --quantize int3", "evaluate", "{s}/existing", "--quantize", "int3"),
    _tool("tools", "compare: not a run folder", "compare", "{s}/existing"),
    _tool("tools", "compare --reference nano: no recorded run of the algorithm", "compare", "{s}/sft-run",
          "--reference", "nano"),
    _tool("tools", "compare: unknown book algorithm", "compare", "{s}/sft-run", "--reference", "dpoo"),
    _tool("tools", "runs: folder missing", "runs", "{s}/no-outputs"),
    _tool("tools", "chat: run folder missing", "chat", "{s}/no-run"),
    _tool("tools", "export: run folder missing", "export", "{s}/no-run", "{s}/exported"),
    _tool("tools", "export: destination cannot be written", "export", "{s}/existing", "{s}/afile/exported"),
    _tool("tools", "nano-book: unknown algorithm", "nano-book", "--algorithms", "grpoo"),
    _tool("tools", "sweep: unknown grid key", "sweep", "{r}/dpo.yaml", "--profile", "tiny", "--grid", "betta=0.1",
          "--out", "{s}/sweep"),
    _tool("tools", "sweep: grid value of the wrong type", "sweep", "{r}/dpo.yaml", "--grid", "beta=high",
          "--out", "{s}/sweep"),
    _tool("tools", "sweep: empty grid", "sweep", "{r}/dpo.yaml", "--grid", "beta=", "--out", "{s}/sweep"),
    _tool("tools", "sweep: 0 seeds", "sweep", "{r}/dpo.yaml", "--seeds", "0", "--out", "{s}/sweep"),
    _tool("tools", "sweep: 0 workers", "sweep", "{r}/dpo.yaml", "--workers", "0", "--out", "{s}/sweep"),
    _tool("tools", "sweep: a wandb random search", "sweep", "{s}/random_sweep.yaml", "--out", "{s}/sweep"),
    _tool("tools", "sweep --report: not a sweep folder", "sweep", "{s}/existing", "--report"),
    # TRL options that only TRL's own loss reads, given to a recipe whose objective is ours
    Case("options", "reinforce --delta (no ratio to bound)", _tiny("reinforce.yaml", "--delta", "4"), says="delta"),
    Case("options", "rloo --use_adaptive_entropy", _tiny("rloo.yaml", "--use_adaptive_entropy", "true",
                                                         "--entropy_target", "0.5"), says="use_adaptive_entropy"),
    Case("options", "cispo --importance_sampling_level sequence", _tiny("cispo.yaml", "--importance_sampling_level",
                                                                        "sequence"), says="importance_sampling_level"),
    Case("options", "sapo --delta (TRL's sapo ignores it)", _tiny("sapo.yaml", "--delta", "4"), says="delta"),
    Case("options", "ppo --off_policy_mask_threshold", _tiny("ppo.yaml", "--off_policy_mask_threshold", "0.5"),
         says="off_policy_mask_threshold"),
    Case("options", "grpo --use_bias_correction_kl true (our KL term)", _tiny("grpo.yaml", "--beta", "0.04",
                                                                            "--use_bias_correction_kl", "true"),
         says="use_bias_correction_kl"),
    # The tools' surroundings: a port in use, a package left out, a run held by another process, a metric not logged
    Case("surroundings", "chat: port in use", ("{s}/no-run", "--port", "{p}"), tool="chat", port_held=True,
         says="is already in use"),
    Case("surroundings", "chat: --host not of this machine", ("{s}/no-run", "--host", "192.0.2.1"), tool="chat",
         says="--host 192.0.2.1"),
    Case("surroundings", "chat: Gradio not installed", ("{s}/existing",), tool="chat", setup=_broken_gradio,
         pythonpath="{s}/fake-site", says="gradio"),
    Case("surroundings", "sweep --report --metric that no run logged", ("{s}/finished-sweep", "--report", "--metric",
                                                                        "exact_match"), tool="sweep",
         setup=_finished_sweep, says="no run logged it"),
    Case("surroundings", "sweep whose run is held by a live process: still running, exit 75",
         ("{r}/dpo.yaml", "--profile", "tiny", "--grid", "beta=0.1", "--out", "{s}/held-sweep", "--no-evaluate"),
         tool="sweep", lock_held="{s}/held-sweep/beta=0.1/seed-0", expect=75, says="still running"),
)


def make_scratch(folder: Path) -> None:
    """The files the cases point at."""
    write = lambda name, text: (folder / name).write_text(text)  # noqa: E731
    write("afile", "a file where a folder is wanted\n")
    write("typo.yaml", "algorithm: dpo\nlearnig_rate: 1.0e-6\n")
    write("algo.yaml", "algorithm: dpoo\n")
    write("noalgo.yaml", "beta: 0.1\n")
    write("list.yaml", "- algorithm: dpo\n")
    write("syntax.yaml", "algorithm: dpo\nbeta: [0.1\n")
    write("twice.yaml", "algorithm: dpo\nbeta: 0.1\nbeta: 0.2\n")
    write("random_sweep.yaml", "method: random\nrecipe: recipes/dpo.yaml\nparameters: {beta: {min: 0.01, max: 0.5}}\n")
    write("empty.jsonl", "")
    write("notjson.jsonl", '{"prompt": "a",\n')
    write("nocolumn.jsonl", json.dumps({"prompt": "a", "chosen": []}) + "\n")
    write("wrongtype.jsonl", json.dumps({**GOOD_ROW, "prompt": 3}) + "\n")
    good = [json.dumps(GOOD_ROW)] * 299
    write("bad300.jsonl", "\n".join([*good, '{"prompt": "Hi?", "chosen": ]']) + "\n")
    write("cut.jsonl", "\n".join([*good, json.dumps(GOOD_ROW)[:70]]))  # no newline: the copy stopped there
    empty = {**GOOD_ROW, "chosen": [GOOD_ROW["chosen"][0], {"role": "assistant", "content": ""}]}
    write("empty300.jsonl", "\n".join([*good, json.dumps(empty)]) + "\n")
    (folder / "latin1.jsonl").write_bytes(("\n".join(good) + "\n").encode() + json.dumps(
        {**GOOD_ROW, "prompt": "Caf\u00e9?"}, ensure_ascii=False).encode("latin-1") + b"\n")
    write("table.jsonl", "prompt,chosen,rejected\nHi?,Hello.,Go away.\n")
    (folder / "empty-model").mkdir()
    (folder / "config-only").mkdir()
    write("config-only/config.json", "{}")
    (folder / "no-tokenizer").mkdir()
    write("no-tokenizer/config.json", "{}")
    write("no-tokenizer/model.safetensors", "")
    (folder / "existing").mkdir()
    write("existing/config.yaml", "algorithm: dpo\n")  # a folder that already holds a run
    (folder / "sft-run").mkdir()  # a run folder as compare reads it (no recorded nano run of sft)
    write("sft-run/config.yaml", "algorithm: sft\nprofile: nano\n")
    write("sft-run/metrics.jsonl", json.dumps({"step": 1, "loss": 1.0}) + "\n")


def error_lines(stderr: str) -> list[str]:
    """`error: ...` lines, and argparse's `PROG: error: ...` (the tools' flags are parsed by argparse)."""
    return [line for line in stderr.splitlines() if line.startswith("error:") or ": error: " in line]


def judge(code: int, stderr: str, expect: int, says: str | None = None) -> str:
    errors = error_lines(stderr)
    if "Traceback (most recent call last)" in stderr:
        return "traceback"
    if code == 0:
        return "silent"
    if code == expect and (len(errors) == 1 or expect != 2) and (says is None or says in " ".join(stderr.split())):
        return "clear"
    return "unclear"


def start_holder(repo: Path, folder: Path, env: dict, timeout: float = 300) -> subprocess.Popen:
    """A real tiny run writing into `folder`, returned once it has saved a checkpoint (it runs until stopped)."""
    holder = subprocess.Popen([sys.executable, str(repo / "recipes" / "run.py"), str(repo / "recipes" / "dpo.yaml"),
                               "--profile", "tiny", "--output_dir", str(folder), "--max_steps", "1000000",
                               "--save_strategy", "steps", "--save_steps", "2"], cwd=folder.parent, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    while not any(folder.glob("checkpoint-*/trainer_state.json")):
        if holder.poll() is not None or time.monotonic() > deadline:
            holder.kill()
            raise RuntimeError(f"the run meant to hold {folder} ended or stalled before its first checkpoint")
        time.sleep(0.2)
    return holder


def hold_run_lock(repo: Path, folder: Path, env: dict) -> subprocess.Popen:
    """A live process holding `folder`'s run lock (as a run does for its whole life), returned once it holds it."""
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from rlhf_recipes.run_lock import RunLock\n"
        "lock = RunLock(sys.argv[1], 'recipes/run.py (a run still going)').acquire(); print('held', flush=True)\n"
        "time.sleep(600)"), str(folder)], env={**env, "PYTHONPATH": str(repo)}, stdout=subprocess.PIPE, text=True)
    if holder.stdout.readline().strip() != "held":
        holder.kill()
        raise RuntimeError(f"could not hold the run lock of {folder}")
    return holder


def run_case(case: Case, repo: Path, scratch: Path, timeout: int) -> dict:
    import socket

    port = socket.socket() if case.port_held else None
    if port is not None:
        port.bind(("127.0.0.1", 0))
        port.listen(1)
    fill = lambda a: (a.replace("{r}", str(repo / "recipes")).replace("{s}", str(scratch))  # noqa: E731
                      .replace("{p}", str(port.getsockname()[1]) if port else "{p}"))
    argv = [fill(a) for a in case.argv]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1",
           "HF_HOME": str(scratch / "hf-home")}
    timeout = min(timeout, case.timeout or timeout)
    if case.setup is not None:
        case.setup(repo, scratch)
    holder = start_holder(repo, Path(fill(case.hold)), env) if case.hold else None
    if case.lock_held:
        holder = hold_run_lock(repo, Path(fill(case.lock_held)), env)
    start = time.time()
    try:
        command = ["-m", "rlhf_recipes.tools", case.tool] if case.tool else [str(repo / "recipes" / "run.py")]
        if case.tool:  # the repo's package, whatever is installed
            first = [fill(case.pythonpath)] if case.pythonpath else []
            env["PYTHONPATH"] = os.pathsep.join(p for p in (*first, str(repo), env.get("PYTHONPATH")) if p)
        done = subprocess.run([sys.executable, *command, *argv], cwd=scratch, env=env,
                              capture_output=True, text=True, timeout=timeout)
        code, stderr = done.returncode, done.stderr
    except subprocess.TimeoutExpired:
        code, stderr = -1, "timeout"
    finally:
        if holder is not None:
            holder.kill()
            holder.wait()
        if port is not None:
            port.close()
    seconds = time.time() - start
    errors = error_lines(stderr)
    message = errors[0] if errors else (stderr.strip().splitlines() or [""])[-1]
    return {"group": case.group, "case": case.name, "exit": code,
            "verdict": judge(code, stderr, case.expect, case.says), "seconds": round(seconds, 1),
            "message": message[:300]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[1],
                        help="checkout whose recipes/run.py is tried (default: this one)")
    parser.add_argument("--only", help="run only the cases of this group (recipe, numbers, data, models, rewards, "
                        "runs, tools, options, surroundings)")
    parser.add_argument("--json", type=Path, help="also write every result here")
    parser.add_argument("--timeout", type=int, default=300)
    args = parser.parse_args(argv)

    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table
    from tqdm import tqdm

    cases = [c for c in CASES if args.only in (None, c.group)]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in tqdm(cases, desc="bad inputs", unit="case"):
            scratch = Path(tmp) / f"case{len(results)}"
            scratch.mkdir()
            make_scratch(scratch)
            results.append(run_case(case, args.repo.resolve(), scratch, args.timeout))
    table = Table(title=f"bad inputs against {args.repo}")
    for column in ("group", "case", "verdict", "exit", "seconds", "message"):
        table.add_column(column, overflow="fold")
    for r in results:  # escaped: a message's "[chat]" is text, not rich markup
        table.add_row(*(escape(str(r[c])) for c in ("group", "case", "verdict", "exit", "seconds", "message")))
    Console(width=200).print(table)
    counts = {v: sum(r["verdict"] == v for r in results) for v in ("clear", "traceback", "silent", "unclear")}
    clear_times = sorted(r["seconds"] for r in results if r["verdict"] == "clear" and r["exit"] == 2)
    median = clear_times[len(clear_times) // 2] if clear_times else None
    print(f"{len(results)} cases: " + ", ".join(f"{n} {v}" for v, n in counts.items())
          + (f"; median time to a clear error {median} s" if median is not None else ""))
    if args.json:
        args.json.write_text(json.dumps({"repo": str(args.repo), "results": results, "counts": counts}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
