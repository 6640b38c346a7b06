"""bf16 only where the machine runs it faster than fp32: the decision, its probe cache, and a real AVX2-only run."""

import json
import os
import subprocess
import sys

import pytest
import torch

from vocabridge.config import ConfigError, Training, parse
from vocabridge.nmt import precision
from vocabridge.nmt.precision import resolve_bf16


def never() -> float:
    raise AssertionError("the probe must not run here")


def test_auto_uses_bf16_only_when_the_probe_finds_it_faster():
    fast = resolve_bf16("auto", "cpu", cpu_supported=lambda: True, speedup=lambda: 1.6)
    slow = resolve_bf16("auto", "cpu", cpu_supported=lambda: True, speedup=lambda: 0.9)
    level = resolve_bf16("auto", "cpu", cpu_supported=lambda: True, speedup=lambda: 1.01)
    assert fast.bf16 and fast.name == "bf16" and "1.60x" in fast.reason
    assert not slow.bf16 and not level.bf16 and slow.as_metrics()["precision"] == "fp32"


def test_a_cpu_without_native_bf16_never_gets_it_and_is_never_probed():
    warnings = []
    auto = resolve_bf16("auto", "cpu", cpu_supported=lambda: False, speedup=never, warn=warnings.append)
    forced = resolve_bf16(True, "cpu", cpu_supported=lambda: False, speedup=never, warn=warnings.append)
    assert not auto.bf16 and not forced.bf16
    assert len(warnings) == 1 and warnings[0].startswith("warning: bf16: true") and "\n" not in warnings[0]


def test_false_is_fp32_and_true_is_bf16_on_native_hardware():
    assert not resolve_bf16(False, "cpu", cpu_supported=never, speedup=never).bf16
    assert resolve_bf16(True, "cpu", cpu_supported=lambda: True, speedup=never).bf16
    with pytest.raises(ValueError, match="auto, true or false"):
        resolve_bf16("yes", "cpu")


def test_the_probe_runs_once_per_machine(tmp_path, monkeypatch):
    monkeypatch.setenv("VOCABRIDGE_CACHE", str(tmp_path))
    monkeypatch.setattr(precision.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    calls = []

    def probe() -> float:
        calls.append(1)
        return 1.3

    assert precision.cached_cpu_speedup(probe) == 1.3
    assert precision.cached_cpu_speedup(probe) == 1.3
    assert len(calls) == 1
    (entry,) = json.loads((tmp_path / "precision.json").read_text()).values()
    assert entry["speedup"] == 1.3
    (tmp_path / "precision.json").write_text("not json")  # a damaged cache is measured again, not an error
    monkeypatch.setattr(precision, "_DECIDED", {})  # by the next process
    assert precision.cached_cpu_speedup(probe) == 1.3 and len(calls) == 2


def test_a_probe_on_a_busy_machine_is_not_kept_but_decides_once_per_process(tmp_path, monkeypatch):
    monkeypatch.setenv("VOCABRIDGE_CACHE", str(tmp_path))
    monkeypatch.setattr(precision.os, "getloadavg", lambda: (64.0, 64.0, 64.0))
    calls = []
    assert precision.cached_cpu_speedup(lambda: calls.append(1) or 0.9) == 0.9
    assert precision.cached_cpu_speedup(lambda: calls.append(1) or 1.4) == 0.9  # one decision in one process
    assert len(calls) == 1 and not (tmp_path / "precision.json").exists()
    monkeypatch.setattr(precision, "_DECIDED", {})  # the next process measures again
    assert precision.cached_cpu_speedup(lambda: calls.append(1) or 1.4) == 1.4
    assert len(calls) == 2 and not (tmp_path / "precision.json").exists()


def test_what_another_process_writes_later_never_changes_this_process_s_decision(tmp_path, monkeypatch):
    """Under load this process measured 0.9 (fp32) and kept it to itself; a stage it started, on a quieter moment,
    wrote 1.4 (bf16) for the same machine: this process still decides fp32, the next one reads 1.4."""
    monkeypatch.setenv("VOCABRIDGE_CACHE", str(tmp_path))
    monkeypatch.setattr(precision.os, "getloadavg", lambda: (64.0, 64.0, 64.0))
    assert precision.cached_cpu_speedup(lambda: 0.9) == 0.9
    key = precision._machine_key()
    (tmp_path / "precision.json").write_text(json.dumps({key: {"speedup": 1.4, "measured": "later"}}))
    assert precision.cached_cpu_speedup(lambda: 2.0) == 0.9
    monkeypatch.setattr(precision, "_DECIDED", {})
    assert precision.cached_cpu_speedup(lambda: 2.0) == 1.4


def test_the_probe_times_one_thread_by_its_cpu_time_and_gives_the_threads_back(monkeypatch):
    """Whatever the stage's thread count, the probe runs on one thread (at two, other work on the machine swung its
    answer 0.15-4.3x) and each pass counts the CPU time the process got, not the clock; the stage's threads come
    back afterwards, also when the probe fails."""
    seen, clocks = [], []
    real_block = precision._block_seconds

    def spy(bf16, budget, give_up_after=None):
        seen.append(torch.get_num_threads())
        return real_block(bf16, 0.01, give_up_after)

    monkeypatch.setattr(precision, "_block_seconds", spy)
    real_clock = precision.time.process_time
    monkeypatch.setattr(precision.time, "process_time", lambda: clocks.append(1) or real_clock())
    torch.set_num_threads(2)
    try:
        assert precision.probe_cpu_speedup() > 0
        assert seen == [1, 1] and torch.get_num_threads() == 2 and len(clocks) >= 4

        def broken(*_args, **_kwargs):
            raise RuntimeError("probe failed")

        monkeypatch.setattr(precision, "_block_seconds", broken)
        with pytest.raises(RuntimeError):
            precision.probe_cpu_speedup()
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(1)


def test_params_accept_auto_true_false_and_name_a_bad_value():
    for value in ("auto", True, False):
        assert parse(Training, {"bf16": value}, "params.pretrain.train").bf16 == value
    with pytest.raises(ConfigError, match="params.pretrain.train.bf16"):
        parse(Training, {"bf16": "yes"}, "params.pretrain.train")


def test_an_avx2_only_cpu_computes_in_fp32_even_when_bf16_is_forced(tmp_path):
    """torch and oneDNN limited to AVX2, as on the CPUs where bf16 runs ~60x slower than fp32."""
    env = dict(os.environ, ATEN_CPU_CAPABILITY="avx2", ONEDNN_MAX_CPU_ISA="AVX2", VOCABRIDGE_CACHE=str(tmp_path))
    code = ("import json, torch; from vocabridge.nmt.precision import resolve_bf16, describe_cpu; "
            "print(json.dumps([describe_cpu(), resolve_bf16('auto').bf16, resolve_bf16(True).bf16]))")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    cpu, auto, forced = json.loads(proc.stdout)
    assert cpu["capability"] == "AVX2" and cpu["bf16_native"] is False
    assert auto is False and forced is False
    assert "warning: bf16: true" in proc.stderr
