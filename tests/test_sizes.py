"""`vocabridge sizes`: one study's verdicts at several in-domain sizes, read from its results folders."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import cli
from vocabridge.errors import InputError
from vocabridge.sizes import differences, gather


def folder(root: Path, name: str, pairs: int, lines: list[tuple], dev_books: bool = True) -> Path:
    """A results folder: seed_comparisons.csv from (row, against, delta, verdict) and one cell record per row."""
    out = root / name
    rows = []
    for row, against, delta, verdict in lines:
        for test_set in ("test", "dev books") if dev_books else ("test",):
            shift = 0.0 if test_set == "test" else -0.1
            rows.append({"row": row, "against": against, "seeds": 5, "reference_seeds": 5, "form": "paired",
                         "delta": delta + shift, "ci_low": delta + shift - 0.5, "ci_high": delta + shift + 0.5,
                         "p_value": 0.01, "p_holm": 0.02, "verdict": verdict, "test_set": test_set})
    frame = pd.DataFrame(rows)
    if not dev_books:
        frame = frame.drop(columns="test_set")  # a report written before the second test set had lines
    out.mkdir(parents=True)
    frame.to_csv(out / "seed_comparisons.csv", index=False)
    for row in {line[0] for line in lines}:
        cell = out / "cells" / row / "s1"
        cell.mkdir(parents=True)
        machine = {"cpu": "AMD EPYC", "capability": "AVX512", "bf16_native": True, "threads": 1}
        (cell / "record.json").write_text(json.dumps({
            "finetune": {"train_pairs": pairs - 3, "updates": pairs // 4, "train_seconds": pairs * 0.3,
                         "target_tokens_per_s": pairs / 2},
            "metrics": {"seconds": 50.0}, "machine": machine}))
    return out


@pytest.fixture
def folders(tmp_path) -> list[Path]:
    small = folder(tmp_path, "study", 2000, [("fwet", "ft-tgtv-random", 0.4, "not decisive"),
                                             ("ft-tgtv-random", "ft-srcv", 2.8, "decisive"),
                                             ("in-domain", "ft-srcv", -2.6, "decisive"),
                                             ("ft-srcv", "ft-tgtv-random", -2.8, "decisive")], dev_books=False)
    large = folder(tmp_path, "size-8000", 8000, [("fwet", "ft-tgtv-random", 0.1, "not decisive"),
                                                 ("ft-tgtv-random", "ft-srcv", 1.0, "decisive"),
                                                 ("in-domain", "ft-srcv", -0.5, "not decisive")])
    return [large, small]


def test_the_sizes_line_up_and_a_reference_turned_round_counts(folders):
    sizes = gather(folders)
    assert sorted(sizes.sizes.values()) == [1997, 7997]  # from the cells' records, not the folder's name
    gain = differences(sizes, "fwet", "ft-tgtv-random")
    assert gain[gain["test_set"] == "test"]["delta"].tolist() == [0.4, 0.1]  # by size
    assert gain[gain["test_set"] == "dev books"]["size"].tolist() == [7997]  # the older table has the test set only
    turned = differences(sizes, "ft-tgtv-random", "ft-srcv")
    assert turned[turned["test_set"] == "test"]["delta"].tolist() == [2.8, 1.0]  # its own line, not the turned one
    back = differences(sizes, "ft-srcv", "ft-tgtv-random")
    line = back[(back["size"] == 7997) & (back["test_set"] == "test")].iloc[0]
    assert (line["delta"], line["ci_low"], line["ci_high"]) == (-1.0, -1.5, -0.5)  # the sign and the interval


def test_the_command_writes_the_table_and_both_figures(folders, tmp_path):
    stages = {"finetune@fwet-1": {"expected_seconds": 4938.0}, "finetune@fwet-2": {"expected_seconds": 4940.0},
              "transfer@fwet-1": {"expected_seconds": 20.0}}
    (folders[0] / "flow_run.json").write_text(json.dumps({"stages": stages}))
    out = tmp_path / "sizes"
    proc = cli("sizes", *map(str, folders), "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert {"sizes.csv", "sizes.md", "gains.png", "regimes.png"} <= {p.name for p in out.iterdir()}
    text = (out / "sizes.md").read_text()
    assert "| fwet - ft-tgtv-random, test | +0.40 [-0.10, 0.90] not decisive (5 seeds) |" in text
    assert text.index("## What the sizes say") < text.index("## The verdicts by size")  # the answer leads
    assert "| in-domain - ft-srcv, dev books |  | -0.60 [-1.10, -0.10] not decisive (5 seeds) |" in text
    assert (out / "gains.png").stat().st_size > 5000
    comparisons = folders[0] / "seed_comparisons.csv"  # a side short of seeds says how many each side has
    frame = pd.read_csv(comparisons)
    frame.loc[frame["row"] == "in-domain", ["seeds", "reference_seeds", "verdict"]] = [2, 1, "one seed: not a finding"]
    frame.to_csv(comparisons, index=False)
    assert cli("sizes", *map(str, folders), "--out", str(out)).returncode == 0
    assert "-0.50 [-1.00, 0.00] one seed: not a finding (2 seeds against 1) |" in (out / "sizes.md").read_text()
    # the cost of a cell at each size, against the flow's estimate where the folder keeps the run's record
    cost = pd.read_csv(out / "costs.csv").set_index(["size", "row"])
    assert cost.loc[(7997, "fwet"), "finetune_min"] == 40.0 and cost.loc[(1997, "fwet"), "updates"] == 500
    assert cost.loc[(7997, "fwet"), "expected_finetune_min"] == 82.3  # its own fine-tune's estimate (fwet-1)
    assert pd.isna(cost.loc[(1997, "fwet"), "expected_finetune_min"])  # that folder keeps no flow record
    assert cost.loc[(7997, "fwet"), "machine"] == "AMD EPYC AVX512, bf16 yes, 1 thread"
    assert cost.loc[(7997, "fwet"), "tok_s"] == 4000 and cost.loc[(7997, "fwet"), "tok_s_range"] == "4000-4000"
    assert "## Cost per cell" in text and "| 7997 | fwet | 1 | 0 | 2000 | 40 | 40.0-40.0 | 82.3 |" in \
        (out / "sizes.md").read_text()
    # a row whose seeds ran on two machines alike by name but not by precision: a line each, and the flow's
    # estimate only beside the cells that its run made (fwet-2 here; fwet-1's record says another machine's run)
    other = folders[0] / "cells" / "fwet" / "s2"
    other.mkdir()
    data = json.loads((folders[0] / "cells" / "fwet" / "s1" / "record.json").read_text())
    data["finetune"] |= {"precision": "fp32", "train_seconds": 6000.0}
    (other / "record.json").write_text(json.dumps(data))
    stages["finetune@fwet-1"]["outcome"] = "up-to-date"  # a later sitting of the flow found it made
    (folders[0] / "flow_run.json").write_text(json.dumps({"stages": stages}))
    assert cli("sizes", *map(str, folders), "--out", str(out)).returncode == 0
    cost = pd.read_csv(out / "costs.csv")
    lines = cost[(cost["size"] == 7997) & (cost["row"] == "fwet")].set_index("machine")
    assert lines.loc["AMD EPYC AVX512, bf16 yes, 1 thread, fp32", ["cells", "finetune_min"]].tolist() == [1, 100.0]
    assert lines.loc["AMD EPYC AVX512, bf16 yes, 1 thread, fp32", "expected_finetune_min"] == 82.3  # fwet-2's
    assert pd.isna(lines.loc["AMD EPYC AVX512, bf16 yes, 1 thread", "expected_finetune_min"])
    assert "- 7,997 pairs: 0 of 4 fine-tuned cells" in (out / "sizes.md").read_text()  # both lines count
    other.joinpath("record.json").unlink()
    other.rmdir()
    # a fine-tune stopped by its cap counts against convergence, a row that does not fine-tune does not count
    record = folders[0] / "cells" / "fwet" / "s1" / "record.json"
    data = json.loads(record.read_text())
    data["finetune"]["stopped"] = "max_updates reached"
    record.write_text(json.dumps(data))
    (folders[0] / "cells" / "out-domain" / "s1").mkdir(parents=True)
    (folders[0] / "cells" / "out-domain" / "s1" / "record.json").write_text(json.dumps(
        {"finetune": {"updates": 0, "best_update": 0}, "metrics": {"seconds": 9.0}}))
    assert cli("sizes", *map(str, folders), "--out", str(out)).returncode == 0
    assert "- 7,997 pairs: 1 of 3 fine-tuned cells stopped by their cap" in (out / "sizes.md").read_text()


def test_bad_folders_are_one_line_and_write_nothing(folders, tmp_path):
    out = tmp_path / "never"
    proc = cli("sizes", str(folders[0]), str(folders[0]), "--out", str(out))
    assert proc.returncode != 0 and "7997 training pairs, as" in proc.stderr and not out.exists()
    proc = cli("sizes", str(tmp_path / "nowhere"), "--out", str(out))
    assert proc.returncode != 0 and "seed_comparisons.csv: no such file" in proc.stderr and not out.exists()
    proc = cli("sizes", *map(str, folders), "--out", str(out), "--methods", "va-llm")
    assert proc.returncode != 0 and "no comparison of ['va-llm']" in proc.stderr and not out.exists()
    with pytest.raises(InputError, match="no cell record names its training pairs"):
        (folders[0] / "cells" / "fwet" / "s1" / "record.json").write_text("{}")
        for row in ("ft-tgtv-random", "in-domain"):
            (folders[0] / "cells" / row / "s1" / "record.json").write_text("{}")
        gather([folders[0]])


def test_the_answers_follow_the_fixed_rules(tmp_path):
    """Initialising matters where a gain is decisive on both test sets, is negligible where every difference from
    random new rows stays within +-0.5 at 95% on both, and stops mattering from the smallest size where it is
    negligible at every larger size too; Single-Run and the new vocabulary by the sign of a decisive difference."""
    from vocabridge.sizes import answers

    small = folder(tmp_path, "study", 2000, [("fwet", "ft-tgtv-random", 0.9, "decisive"),
                                             ("va-llm", "ft-tgtv-random", -1.6, "decisive"),
                                             ("ft-tgtv-random", "ft-srcv", 2.8, "decisive"),
                                             ("in-domain", "ft-srcv", -2.6, "decisive")])
    middle = folder(tmp_path, "size-8000", 8000, [("fwet", "ft-tgtv-random", 0.0, "not decisive"),
                                                  ("ft-tgtv-random", "ft-srcv", 1.0, "decisive"),
                                                  ("in-domain", "ft-srcv", 0.2, "not decisive")])
    large = folder(tmp_path, "size-all", 20000, [("fwet", "ft-tgtv-random", 0.05, "not decisive"),
                                                 ("ft-tgtv-random", "ft-srcv", 0.3, "not decisive"),
                                                 ("in-domain", "ft-srcv", 1.5, "decisive")])
    text = "\n".join(answers(gather([small, middle, large]), ["fwet", "va-llm"], negligible=0.7))
    assert "stops mattering from 7,997 pairs on" in text
    assert "1,997 pairs, initialising the new rows: matters: fwet gain decisively on both test sets" in text
    assert "; va-llm lose decisively on both" in text
    assert "19,997 pairs, Single-Run (in-domain) against Pretrain-Finetune (ft-srcv): ahead" in text
    assert "1,997 pairs, Single-Run (in-domain) against Pretrain-Finetune (ft-srcv): behind" in text
    # a stricter bound: the intervals (+-0.5 around the difference) no longer rule out 0.5 BLEU
    strict = answers(gather([small, middle, large]), ["fwet"], negligible=0.5)
    assert strict[0].startswith("- Initialising the new rows is negligible at no size measured")
    assert any("7,997 pairs, initialising the new rows: not settled" in line for line in strict)
