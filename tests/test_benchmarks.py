"""The benchmarks stay runnable: every script in benchmarks/ imports and parses its arguments, and the two that
need no trained model run at a toy size and still agree with their peer (benchmarks are run by hand, rarely,
so a renamed import would otherwise go unnoticed until someone needs the figure)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # each runs scripts in processes of their own: CI runs them, the fast lane does not

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((ROOT / "benchmarks").glob("*.py"))

# One interpreter for all of them: each script run as __main__ with --help, which argparse answers with exit 0.
HELP_DRIVER = """
import contextlib, io, json, runpy, sys
out = {}
for path in sys.argv[1:]:
    sys.argv = [path, "--help"]
    text = io.StringIO()
    try:
        with contextlib.redirect_stdout(text):
            runpy.run_path(path, run_name="__main__")
        out[path] = "returned without printing its usage"
    except SystemExit as exc:
        out[path] = "ok" if exc.code in (0, None) and "usage:" in text.getvalue() else f"exit {exc.code}"
    except Exception as exc:
        out[path] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


def run(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_every_benchmark_imports_and_parses_its_arguments():
    assert len(SCRIPTS) >= 10
    done = run(["-c", HELP_DRIVER, *map(str, SCRIPTS)])
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert {Path(p).name: r for p, r in results.items() if r != "ok"} == {}


def test_va_llm_benchmark_runs_at_a_toy_size():
    done = run(["benchmarks/va_llm.py", "--new", "300", "--old", "300", "--shared", "60", "--dim", "16"])
    assert done.returncode == 0, done.stderr[-2000:]
    # 300 new pieces, of them 3 special (`</s>`, `<unk>`, `<pad>`) that keep their rows: va-llm maps the other 297
    assert "va-llm (k=10" in done.stdout and "for 297 tokens" in done.stdout


def test_sponsored_decoding_benchmark_decodes_the_same_pieces_all_three_ways():
    done = run(["benchmarks/sponsored_decoding.py", "--sentences", "2", "--source-len", "5", "--max-len", "4",
                "--vocab", "200", "--repeat", "1"])
    assert done.returncode == 0, done.stderr[-2000:]
    assert "same pieces: True" in done.stdout and "re-projecting / Prefixes" in done.stdout


def test_sponsored_decoding_benchmark_beam_searches_a_model_directory_the_same_both_ways(tmp_path):
    """The beam mode on a model directory as the pipeline saves it (two tiny BERTs and a coordinator)."""
    from vocabridge.config import AbnetAdapters, BertArch, Sponsored
    from vocabridge.plm.abnet import new_abnet, save_abnet
    from vocabridge.plm.bert import build_bert, save_bert, train_plm_tokenizer

    text = ["Im Anfang schuf Gott Himmel und Erde.", "Und die Erde war wüst und leer.",
            "Und Gott sprach: Es werde Licht!", "Und es ward Licht."]
    tokenizer = train_plm_tokenizer(text, 60, tmp_path / "tok")
    size = BertArch(hidden=32, layers=2, heads=2, ffn=64, max_positions=40, dropout=0.0)
    for side, seed in (("de", 1), ("en", 2)):
        save_bert(build_bert(size, tokenizer, seed), tokenizer, tmp_path / side)
    model, source_tokenizer, target_tokenizer = new_abnet(
        tmp_path / "de", tmp_path / "en", AbnetAdapters(encoder_inner=16, decoder_ffn=32, max_target_len=30), True, 7,
        "coordinator", Sponsored(coordinator_layers=2, coordinator_ffn=64, dropout=0.0, distill=False))
    save_abnet(model, tmp_path / "model", source_tokenizer, target_tokenizer)
    (tmp_path / "test.de").write_text("\n".join(text * 2) + "\n", encoding="utf-8")
    done = run(["benchmarks/sponsored_decoding.py", "--beam", "3", "--model", str(tmp_path / "model"), "--source",
                str(tmp_path / "test.de"), "--batch", "3", "--max-len", "6", "--repeat", "1"])
    assert done.returncode == 0, done.stderr[-2000:]
    assert "beam 3, 8 sentences" in done.stdout and "whole batch / beam_search" in done.stdout
    assert "same pieces: True" in done.stdout


def test_plm_precision_benchmark_times_both_arms_of_each_update():
    done = run(["benchmarks/plm_precision.py", "--profile", "tiny", "--rounds", "1"])
    assert done.returncode == 0, done.stderr[-2000:]
    assert "| masked-LM (plm) |" in done.stdout and "| masked-LM, every position scored (peer) |" in done.stdout
    assert "scoring the masked pieces only:" in done.stdout and "bf16: auto picks" in done.stdout


def test_plm_cpu_ops_benchmark_times_each_op_and_each_update_against_pytorch_s():
    done = run(["benchmarks/plm_cpu_ops.py", "--profile", "plm", "--only", "abnet", "--rounds", "1"])
    assert done.returncode == 0, done.stderr[-2000:]
    assert "| dropout [48, 30, 256] bfloat16 x 20 |" in done.stdout
    assert "| label-smoothed cross-entropy [1344, 8000] bfloat16 x 5 |" in done.stdout
    updates = [line.split(" | ") for line in done.stdout.splitlines() if line.startswith("| abnet")]
    assert updates and all(int(cols[6]) > 0 for cols in updates)  # the peer put dropout modules back


def test_allocator_benchmark_runs_each_arm_on_its_own_allocator():
    from vocabridge.allocator import find_tcmalloc

    done = run(["benchmarks/allocator.py", "--profile", "tiny", "--updates", "22", "--rounds", "1"])
    assert done.returncode == 0, done.stderr[-2000:]  # an arm on the wrong allocator fails the script
    rows = {line.split(" | ")[0].strip("| ") for line in done.stdout.splitlines() if line.startswith("| ")}
    assert "system" in rows and ("tcmalloc" in rows) == (find_tcmalloc() is not None)


def test_startup_benchmark_times_stages_and_finds_no_slow_library_loaded_at_import():
    # one round, two stages: a stage that needs torch and one that needs nothing heavy until it trains
    done = run(["benchmarks/startup.py", "--runs", "1", "--stages", "cbow", "evaluate"])
    assert done.returncode == 0, done.stderr[-2000:]
    assert "import torch:" in done.stdout
    loaded = {line.split()[0]: line.split("  ")[-1].split() for line in done.stdout.splitlines()
              if line.startswith(("cbow ", "evaluate "))}
    assert set(loaded) == {"cbow", "evaluate"}
    # transformers' model code, gensim and pandas cost seconds: a stage imports them where it uses them
    assert {"transformers", "gensim", "pandas"}.isdisjoint(loaded["cbow"] + loaded["evaluate"]), loaded
    assert "torch" in loaded["evaluate"]


def test_shared_decode_speed_benchmark_decodes_alike_both_ways(tmp_path):
    """benchmarks/shared_decode_speed.py on an M2M100 model it builds: greedy, every output identical."""
    from tests.conftest import DE_BIBLE, DE_IT

    (tmp_path / "in.de").write_text("\n".join(DE_BIBLE + DE_IT) + "\n", encoding="utf-8")
    done = run(["benchmarks/shared_decode_speed.py", "--input", str(tmp_path / "in.de"), "--sentences", "6",
                "--beam", "1", "--threads", "1", "--repeat", "1", "--d-model", "16", "--layers", "1",
                "--vocab-size", "60"])
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ctranslate2 / transformers = " in done.stdout and "identical outputs 6/6" in done.stdout
