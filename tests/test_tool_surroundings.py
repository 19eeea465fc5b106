"""A tool stopped by its surroundings (a port in use, a package left out, a device that is not there) ends in one
line naming what and the fix, before any model loads; a bug inside a tool keeps its traceback."""

from __future__ import annotations

import errno
import os
import socket
import sys

import pytest

from rlhf_recipes.tools import cli
from rlhf_recipes.tools.surroundings import SurroundingsError, check_device, check_port_free, one_line


def _held_port():
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen(1)
    return held, held.getsockname()[1]


def test_chat_on_a_port_in_use_says_so_before_loading_anything(monkeypatch, capsys, tmp_path):
    from rlhf_recipes.tools import chat

    def must_not_load(*a, **k):
        raise AssertionError("a run was opened before the port was checked")

    monkeypatch.setattr(chat, "open_trained_model", must_not_load)
    held, port = _held_port()
    with held:
        assert chat.main([str(tmp_path / "some_run"), "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: rlhf-recipes chat: port ")
    assert f"port {port} on 127.0.0.1 is already in use" in err and f"--port {port + 1}" in err


def test_chat_without_gradio_is_one_line_before_loading(monkeypatch, capsys, tmp_path):
    from rlhf_recipes.tools import chat

    monkeypatch.setitem(sys.modules, "gradio", None)  # `import gradio` fails, installed or not
    monkeypatch.setattr(chat, "open_trained_model", lambda *a, **k: pytest.fail("opened a run first"))
    held, port = _held_port()
    held.close()  # a free port
    assert chat.main([str(tmp_path / "some_run"), "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs the Python package `gradio`" in err
    assert "pip install 'rlhf-recipes[chat]'" in err


@pytest.mark.parametrize("host, port, message", [
    ("no-such-host.invalid", 7860, "--host no-such-host.invalid is not an address of this machine"),
    ("127.0.0.1", 70000, "--port 70000 is not a port number"),
    ("192.0.2.1", 7860, "--host 192.0.2.1 is not an address of this machine"),  # TEST-NET: never local
])
def test_bad_hosts_and_ports_are_named(host, port, message):
    with pytest.raises(SurroundingsError, match=message):
        check_port_free(host, port, "rlhf-recipes chat")


def test_a_device_this_machine_lacks_is_named(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SurroundingsError, match="--device cuda:1, but torch sees no CUDA GPU here"):
        check_device("cuda:1", "rlhf-recipes chat")
    with pytest.raises(SurroundingsError, match="--device tpu is not a device"):
        check_device("tpu", "rlhf-recipes chat")
    check_device("cpu", "rlhf-recipes chat")


def test_cli_turns_a_missing_package_deep_in_a_tool_into_one_line(monkeypatch, capsys):
    def tool(argv):
        raise ModuleNotFoundError("No module named 'matplotlib'", name="matplotlib")

    module = type(sys)("fake_tool_module")
    module.main = tool
    monkeypatch.setitem(sys.modules, "fake_tool_module", module)
    monkeypatch.setitem(cli.COMMANDS, "fake", cli.Command("fake_tool_module:main", "a tool"))
    assert cli.main(["fake"]) == 2
    assert capsys.readouterr().err == ("error: rlhf-recipes fake needs the Python package `matplotlib`, which is not "
                                       "installed here: pip install matplotlib\n")
    module.main = lambda argv: socket.socket().bind(("127.0.0.1", held_port))  # EADDRINUSE from deep inside
    held, held_port = _held_port()
    with held:
        assert cli.main(["fake"]) == 2
    assert "already in use" in capsys.readouterr().err


def test_a_port_in_use_deep_in_a_tool_names_the_port_flag_only_where_the_tool_has_one():
    in_use = OSError(errno.EADDRINUSE, "Address already in use")
    assert one_line("rlhf-recipes chat", in_use, port_flag=True).endswith("choose another --port")
    train = one_line("rlhf-recipes train", in_use)  # train has no --port (its processes' port is accelerate's)
    assert "--port" not in train and "stop the program that holds it" in train
    assert cli.COMMANDS["chat"].port_flag and not cli.COMMANDS["train"].port_flag


def test_permission_denied_says_whether_reading_or_writing_was_refused(monkeypatch, tmp_path):
    # the checks run as root in CI, where chmod does not refuse: fake what the file system allows
    unreadable = tmp_path / "data.jsonl"
    unreadable.write_text("{}")
    monkeypatch.setattr(os, "access", lambda path, mode: not mode & os.R_OK)
    line = one_line("rlhf-recipes evaluate", PermissionError(errno.EACCES, "Permission denied", str(unreadable)))
    assert f"reading {unreadable}" in line and "write" not in line
    monkeypatch.setattr(os, "access", lambda path, mode: not mode & os.W_OK)
    new_file = tmp_path / "out" / "model.safetensors"
    line = one_line("rlhf-recipes export", PermissionError(errno.EACCES, "Permission denied", str(new_file)))
    assert f"writing {new_file}" in line and "choose a folder you can write to" in line


def test_a_bug_inside_a_tool_keeps_its_traceback(monkeypatch):
    module = type(sys)("fake_tool_module")
    module.main = lambda argv: {}["missing key"]
    monkeypatch.setitem(sys.modules, "fake_tool_module", module)
    monkeypatch.setitem(cli.COMMANDS, "fake", cli.Command("fake_tool_module:main", "a tool"))
    with pytest.raises(KeyError):
        cli.main(["fake"])
    assert one_line("t", ModuleNotFoundError("No module named 'rlhf_recipes.nope'", name="rlhf_recipes.nope")) is None


def test_bench_errors_surroundings_cases_are_all_clear(tmp_path):
    """`python -m benchmarks.bad_inputs --only surroundings`: each fault, as its own process, ends in one line naming it."""
    import json

    from benchmarks.bad_inputs import CASES, main

    out = tmp_path / "errors.json"
    assert main(["--only", "surroundings", "--json", str(out)]) == 0
    results = json.loads(out.read_text())["results"]
    assert len(results) == sum(c.group == "surroundings" for c in CASES) == 5
    assert [(r["case"], r["verdict"]) for r in results if r["verdict"] != "clear"] == []


def test_the_lab_commands_join_through_the_entry_point_group():
    """`rlhf-recipes sweep` keeps its name though the runner's own table does not list it: the installed entry point
    (pyproject.toml, group rlhf_recipes.commands) hands the lab's commands in, and the usage line lists them."""
    from lab.commands import COMMANDS as LAB

    assert not set(LAB) & set(cli.COMMANDS)
    assert {"sweep", "nano-book", "nano-figures", "overoptimization", "pipeline"} <= set(cli.all_commands())
    assert all(cli.all_commands()[name] == command for name, command in LAB.items())
    assert "sweep" in cli.usage()
