"""When a tool cannot do its job because of what surrounds it, one line that says what and the fix.

A port already in use, a package left out of the install, a device that is not there, a socket the
machine does not allow: none of them is a bug of the tool, so none should end in a traceback. The
checks here run before anything slow (loading models), and `cli.py` turns the same failures into
one line when they come from deeper inside a tool.
"""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path

# Optional packages -> the extra of pyproject.toml that installs them
EXTRAS = {"gradio": "chat", "deepspeed": "deepspeed", "bitsandbytes": "qlora", "flash_attn": "flash", "vllm": "vllm"}
OUR_PACKAGES = ("rlhf_recipes", "custom_losses", "rewards")


class SurroundingsError(Exception):
    """A tool's surroundings stop it; the message is the one line to print."""


def install_hint(package: str) -> str:
    top = package.split(".")[0]
    extra = EXTRAS.get(top)
    return f"pip install 'rlhf-recipes[{extra}]' (or pip install {top})" if extra else f"pip install {top}"


def require(package: str, tool: str) -> None:
    """Import `package` now, so a missing or broken install is one line before any slow work."""
    try:
        __import__(package)
    except ImportError as e:  # absent, or present with a dependency of its own missing
        missing = getattr(e, "name", None) or package
        state = "is not installed here" if missing.split(".")[0] == package else f"fails to import here ({e})"
        raise SurroundingsError(f"{tool} needs the Python package `{package}`, which {state}: "
                                f"{install_hint(package)}") from e


def check_port_free(host: str, port: int, tool: str) -> None:
    """Bind (host, port) and let it go: a port another program listens on, a host this machine does not have,
    or a port it may not open is found before the models load, not after."""
    if not 0 <= port <= 65535:
        raise SurroundingsError(f"{tool}: --port {port} is not a port number (0-65535)")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise SurroundingsError(f"{tool}: --host {host} is not an address of this machine ({e.strerror}); "
                                "use 127.0.0.1 (this machine only) or 0.0.0.0 (every interface)") from e
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        # As the web server will: SO_REUSEADDR, so a port left in TIME_WAIT by a closed page counts as free.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as e:
            raise SurroundingsError(port_message(e, host, port, tool)) from e


def port_message(error: OSError, host: str, port: int, tool: str) -> str:
    if error.errno == errno.EADDRINUSE:
        return (f"{tool}: port {port} on {host} is already in use (another chat page or server?): pass --port with "
                f"a free one, e.g. --port {port + 1}, or stop the program that holds it")
    if error.errno in (errno.EACCES, errno.EPERM):
        return (f"{tool}: not allowed to listen on port {port} (ports below 1024 need root): pass --port 1024 "
                "or higher")
    if error.errno == errno.EADDRNOTAVAIL:
        return f"{tool}: --host {host} is not an address of this machine: use 127.0.0.1 or 0.0.0.0"
    return f"{tool}: cannot listen on {host}:{port}: {error.strerror or error}"


def check_device(device: str, tool: str) -> None:
    """A --device that this machine does not have, before the models load onto it."""
    import torch

    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise SurroundingsError(f"{tool}: --device {device}, but torch sees no CUDA GPU here "
                                    f"(torch {torch.__version__}): use --device cpu, or install torch's CUDA build")
        index = device.partition(":")[2]
        if index and (not index.isdigit() or int(index) >= torch.cuda.device_count()):
            raise SurroundingsError(f"{tool}: --device {device}, but this machine has "
                                    f"{torch.cuda.device_count()} CUDA GPU(s): cuda:0 .. "
                                    f"cuda:{torch.cuda.device_count() - 1}")
    elif device == "mps" and not torch.backends.mps.is_available():
        raise SurroundingsError(f"{tool}: --device mps, but this machine has no MPS device: use --device cpu")
    elif device.split(":")[0] not in ("cpu", "cuda", "mps", "xpu"):
        raise SurroundingsError(f"{tool}: --device {device} is not a device: cpu, cuda, cuda:N or mps")


def _permission_denied(path: str) -> str:
    """Whether reading or writing `path` was refused: the exception does not say which, so ask the file system
    now (a file or folder we may not read; else a file or folder we may not write, or create in its parent)."""
    target = Path(path)
    if target.exists() and not os.access(target, os.R_OK | (os.X_OK if target.is_dir() else 0)):
        return f"permission denied reading {path}: make it readable (chmod u+r) or give a copy you can read"
    if not os.access(target if target.exists() else target.parent, os.W_OK):
        return f"permission denied writing {path}: choose a folder you can write to"
    return f"permission denied on {path}: check its permissions and its folders'"


def one_line(tool: str, error: BaseException, port_flag: bool = False) -> str | None:
    """The one line for a failure of the surroundings raised from inside a tool; None for anything else (a bug
    keeps its traceback). port_flag: the tool takes --port."""
    if isinstance(error, SurroundingsError):
        return f"error: {error}"
    if isinstance(error, ModuleNotFoundError) and error.name and not error.name.startswith(OUR_PACKAGES):
        return (f"error: {tool} needs the Python package `{error.name.split('.')[0]}`, which is not installed here: "
                f"{install_hint(error.name)}")
    if isinstance(error, OSError) and error.errno == errno.EADDRINUSE:
        fix = "choose another --port" if port_flag else "stop the program that holds it (another run or server?)"
        return f"error: {tool}: an address or port is already in use ({error.strerror}): {fix}"
    if isinstance(error, PermissionError) and error.filename:
        return f"error: {tool}: {_permission_denied(str(error.filename))}"
    if isinstance(error, OSError) and error.errno == errno.ENOSPC:
        return f"error: {tool}: the disk is full ({error.filename or 'writing'}): free space or choose another folder"
    return None
