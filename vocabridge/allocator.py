"""The memory allocator a training process runs on: TCMalloc where it is installed, else the C library's.

Batches of varying shapes fragment glibc's heap: the plm study's BERT pretraining held 7.8-8.4 GB a process
under glibc and 2.4 GB under TCMalloc, which also ran the updates 1.13x faster (`benchmarks/allocator.py`,
results/allocator). An allocator is chosen before a process starts, so an entry point calls `reexec()`
first thing: the process starts again in place with TCMalloc preloaded (`LD_PRELOAD`, inherited by its children),
once. `$VOCABRIDGE_ALLOCATOR` says which: `auto` (the default: TCMalloc if found), `system`, or a library's path.
The results are the same either way: an allocator changes where tensors live, not what is computed.
"""

from __future__ import annotations

import ctypes.util
import os
import sys
from pathlib import Path

ENV = "VOCABRIDGE_ALLOCATOR"
_STARTED = "VOCABRIDGE_ALLOCATOR_STARTED"  # set in the restarted process: never restart twice
LIBRARY_DIRS = ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64"]  # Debian/Ubuntu, Fedora


def find(soname: str) -> str | None:
    """The path of an installed shared library (`libtcmalloc_minimal.so.4`), or None."""
    for folder in LIBRARY_DIRS:
        if Path(folder, soname).is_file():
            return str(Path(folder, soname))
    name = ctypes.util.find_library(soname.removeprefix("lib").split(".so")[0])
    return name if name and Path(name).is_absolute() else None


def find_tcmalloc() -> str | None:
    """The path of an installed TCMalloc (the minimal build, which has no profiler), or None."""
    return find("libtcmalloc_minimal.so.4")


def wanted() -> str | None:
    """The library `$VOCABRIDGE_ALLOCATOR` asks for (None: the C library's allocator)."""
    choice = os.environ.get(ENV, "auto").strip() or "auto"
    if choice == "system":
        return None
    if choice == "auto":
        return find_tcmalloc()
    if not Path(choice).is_file():
        print(f"error: ${ENV}: {choice} is not a file (auto, system, or a malloc library's path)", file=sys.stderr)
        sys.exit(2)
    return choice


def current() -> str:
    """'tcmalloc', 'jemalloc' or 'system': the allocator this process runs on (Linux; elsewhere 'system')."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return "system"
    return next((name for name in ("tcmalloc", "jemalloc") if f"lib{name}" in maps), "system")


def reexec() -> None:
    """Start this process again on the wanted allocator, with the same interpreter and arguments; returns when
    it already runs on it, when none is wanted or found, or off Linux."""
    if not sys.platform.startswith("linux") or os.environ.get(_STARTED):
        return
    library = wanted()
    if library is None or current() != "system":
        return
    env = dict(os.environ, **{_STARTED: "1"})
    env.setdefault("TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD", str(1 << 40))  # no stderr line per large tensor
    env["LD_PRELOAD"] = " ".join(filter(None, [library, env.get("LD_PRELOAD", "")]))
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, sys.orig_argv, env)
