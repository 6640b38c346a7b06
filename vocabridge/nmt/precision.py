"""Which float precision a stage computes in: bf16 autocast only where this machine runs it faster than fp32.

`bf16: auto` (the default) uses bf16 on a CUDA GPU that supports it, and on a CPU only when oneDNN supports
bf16 there *and* a short timed probe shows it faster than fp32. x86 builds of torch report mkldnn as
available on every CPU, but on a CPU with AVX2 and no AVX-512 bf16 the bf16 kernels are emulated and run
about 60x slower than fp32; on AVX-512 bf16 CPUs bf16 is about 1.1-1.5x faster, on AMX several times.
`bf16: true` forces bf16 where the hardware has it, and falls back to fp32 with a one-line warning where it
does not. The probe runs on one thread and counts each pass's CPU time, so other work on the machine cannot turn
its answer around (a stage that decided otherwise in a flow than under `dvc repro` would train another model);
its result is cached per machine (CPU model, ISA, torch version), so only the first stage on a machine pays its
few hundred milliseconds.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from vocabridge.fileio import write_json

MIN_SPEEDUP = 1.05  # bf16 must beat fp32 by this much on the probe to be chosen: never slower than fp32
PROBE_TOKENS, PROBE_DIM, PROBE_FFN = 256, 256, 1024  # a Transformer feed-forward block of the default model
PROBE_SECONDS = 0.1  # timed work per precision, after one warm-up pass


@dataclass(frozen=True)
class Precision:
    """The precision a stage uses and why; `as_metrics()` goes into the stage's metrics."""

    bf16: bool
    reason: str

    @property
    def name(self) -> str:
        return "bf16" if self.bf16 else "fp32"

    def as_metrics(self) -> dict:
        return {"precision": self.name, "precision_reason": self.reason}


def cpu_name() -> str:
    """The CPU's model name (Linux), else the platform's processor string."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def cpu_bf16_supported() -> bool:
    """oneDNN's own answer: native bf16 instructions (AVX-512 bf16 or AMX); False on AVX2-only CPUs."""
    check = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    try:
        return bool(check()) if check is not None else False
    except RuntimeError:
        return False


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def cpu_elsewhere(interval: float = 0.5) -> float:
    """Cores' worth of CPU that processes other than this one and its children used over `interval` seconds:
    other work on the machine, which makes every timing taken meanwhile too slow."""
    import psutil

    me = psutil.Process()

    def ours() -> float:
        total = 0.0
        for proc in [me, *me.children(recursive=True)]:
            try:
                times = proc.cpu_times()
                total += times.user + times.system
            except psutil.Error:  # ended in between
                continue
        return total

    def busy() -> float:
        times = psutil.cpu_times()
        return sum(times) - times.idle - getattr(times, "iowait", 0.0) - getattr(times, "steal", 0.0) \
            - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)

    start, own, clock = busy(), ours(), time.monotonic()
    time.sleep(interval)
    elapsed = time.monotonic() - clock
    return ((busy() - start) - (ours() - own)) / elapsed


def describe_cpu() -> dict:
    """What every reported timing names: CPU, torch's ISA level, native bf16 yes/no, threads, cores."""
    return {"cpu": cpu_name(), "capability": torch.backends.cpu.get_cpu_capability(),
            "bf16_native": cpu_bf16_supported(), "threads": torch.get_num_threads(), "cores": usable_cores()}


def _block_seconds(bf16: bool, budget: float, give_up_after: float | None = None) -> float:
    """CPU seconds of the fastest forward+backward of a feed-forward block within `budget` seconds; stops early
    once it is clearly slow.

    Each pass is timed by the CPU time this process got, and the fastest pass counts: work elsewhere on the
    machine that takes the core away between or during passes does not make one precision look slower than the
    other. On an AVX10.1 Xeon (bf16 0.6x fp32) under three busy loops on its two cores, one thread's
    wall-clock mean swung 0.53-0.73x and its fastest pass's CPU time 0.55-0.67x; at two threads every timing
    swung 0.15-4.3x, bf16 "faster" in two probes of six: hence one thread (`probe_cpu_speedup`)."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(PROBE_TOKENS, PROBE_DIM, generator=gen, requires_grad=True)
    w1 = torch.randn(PROBE_FFN, PROBE_DIM, generator=gen, requires_grad=True)
    w2 = torch.randn(PROBE_DIM, PROBE_FFN, generator=gen, requires_grad=True)

    def once() -> float:
        started = time.process_time()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            y = torch.nn.functional.linear(torch.relu(torch.nn.functional.linear(x, w1)), w2)
        y.float().sum().backward()
        return time.process_time() - started

    warm = once()  # warm-up (oneDNN primitive creation)
    if give_up_after is not None and warm > give_up_after:
        return warm
    fastest, started = float("inf"), time.perf_counter()
    while True:
        fastest = min(fastest, once())
        if time.perf_counter() - started >= budget or (give_up_after is not None and fastest > give_up_after):
            return fastest


def probe_cpu_speedup() -> float:
    """fp32 time / bf16 time of the probe block on one thread (>1: bf16 is faster): the kernels' relative speed,
    taken where a busy machine cannot disturb it (`_block_seconds`). On the AVX10.1 Xeon two threads' fastest
    passes read 0.54-0.64x beside one busy process, one thread's 0.55-0.60x: the thread count moves it little."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        fp32 = _block_seconds(False, PROBE_SECONDS)
        bf16 = _block_seconds(True, PROBE_SECONDS, give_up_after=max(20 * fp32, 0.02))
    finally:
        torch.set_num_threads(threads)
    return fp32 / bf16


def cache_file() -> Path:
    root = os.environ.get("VOCABRIDGE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "vocabridge")
    return Path(root) / "precision.json"


def _machine_key() -> str:
    isa = ",".join(f"{k}={os.environ[k]}" for k in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA") if k in os.environ)
    return "|".join([cpu_name(), torch.backends.cpu.get_cpu_capability(), torch.__version__, "probe=1-thread-cpu",
                     isa])


_DECIDED: dict[tuple[str, str], dict] = {}  # every figure this process used, by (cache file, key)


def cached(name: str, key: str, measure: Callable[[], dict], fresh: bool = False) -> dict:
    """A measurement of this machine, kept under `key` in the cache folder's NAME.json (atomically written).

    A figure taken while the load average is above half the cores is never written: other work shared the CPU,
    so the next process measures again. Within one process the first figure used stands, whatever the disk says
    later (another process, a stage this one started, may write its own meanwhile): one process decides once, so
    one run never mixes bf16 and fp32. `fresh` measures again."""
    path = cache_file().with_name(f"{name}.json")
    if not fresh and (str(path), key) in _DECIDED:
        return _DECIDED[str(path), key]
    try:
        cache = json.loads(path.read_text())
        cache = cache if isinstance(cache, dict) else {}
    except (OSError, ValueError):
        cache = {}
    if not fresh and isinstance(cache.get(key), dict):
        _DECIDED[str(path), key] = cache[key]
        return cache[key]
    busy = (os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0) > 0.5 * (os.cpu_count() or 1)
    entry = measure()
    _DECIDED[str(path), key] = entry
    if not busy:
        try:
            write_json(path, cache | {key: entry})
        except OSError:
            pass  # a read-only home: measure again next time
    return entry


def cached_cpu_speedup(probe: Callable[[], float] = probe_cpu_speedup) -> float:
    """The probe's result for this machine, measured once and kept in the cache."""
    entry = cached("precision", _machine_key(),
                   lambda: {"speedup": round(probe(), 3), "measured": time.strftime("%Y-%m-%d %H:%M:%S")})
    return float(entry["speedup"])


def resolve_bf16(setting: bool | str, device: torch.device | str = "cpu", *,
                 cpu_supported: Callable[[], bool] = cpu_bf16_supported,
                 speedup: Callable[[], float] = cached_cpu_speedup, warn: Callable[[str], None] | None = None
                 ) -> Precision:
    """Decide bf16 autocast for `device` from a `bf16: auto | true | false` setting."""
    warn = warn or (lambda msg: print(msg, file=sys.stderr))
    device = torch.device(device)
    if setting is False or setting == "false":
        return Precision(False, "bf16: false")
    if setting not in (True, "auto", "true"):
        raise ValueError(f"bf16: expected auto, true or false, got {setting!r}")
    forced = setting is True or setting == "true"
    if device.type == "cuda":
        if torch.cuda.is_bf16_supported():
            return Precision(True, "cuda with bf16 support")
        if forced:
            warn("warning: bf16: true, but this GPU has no bf16 support; computing in fp32")
        return Precision(False, "cuda without bf16 support")
    if device.type != "cpu":
        return Precision(False, f"{device.type}: bf16 autocast not used")
    if not cpu_supported():
        if forced:
            warn(f"warning: bf16: true, but this CPU ({torch.backends.cpu.get_cpu_capability()}) has no native bf16 "
                 "(it would run many times slower); computing in fp32")
        return Precision(False, f"cpu without native bf16 ({torch.backends.cpu.get_cpu_capability()})")
    if forced:
        return Precision(True, "bf16: true on a cpu with native bf16")
    gain = speedup()
    if gain >= MIN_SPEEDUP:
        return Precision(True, f"cpu probe: bf16 {gain:.2f}x fp32")
    return Precision(False, f"cpu probe: bf16 {gain:.2f}x fp32 (not faster)")

