"""The papers' published results tables (vocabridge/data/papers.yaml), as the report reads them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

PAPERS_FILE = Path(__file__).parent / "data" / "papers.yaml"


@dataclass(frozen=True)
class PaperTable:
    """A published results table: each row under the paper's name with the row of ours that runs it, and the
    orderings the paper reports (better, worse), which our runs either reproduce or not."""

    key: str  # file names: paper_KEY.csv
    source: str
    rows: tuple[tuple[str, str, float], ...]  # (the paper's row, our row, published BLEU)
    orderings: tuple[tuple[str, str], ...]  # (our better row, our worse row) as the paper has them
    # the rows differ in pretrain.init by design: an ordering across them is what the table tests, a verdict
    varies: bool = False


def load_papers(path: Path = PAPERS_FILE) -> tuple[dict[str, PaperTable], dict[str, dict[str, int]],
                                                   dict[str, str]]:
    """The tables by key, in the file's order, each table's published latencies (ms a sentence, by our row) and
    the row its speed claim is against (`latency_against`)."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    tables, latency, against = {}, {}, {}
    for key, spec in data.items():
        tables[key] = PaperTable(key, spec["source"], tuple((str(a), str(b), float(c)) for a, b, c in spec["rows"]),
                                 tuple((str(a), str(b)) for a, b in spec["orderings"]), bool(spec.get("varies")))
        latency[key] = {str(row): ms for row, ms in (spec.get("latency_ms") or {}).items()}
        if spec.get("latency_against"):
            against[key] = str(spec["latency_against"])
            if against[key] not in latency[key]:
                raise ValueError(f"{path}: {key}.latency_against: '{against[key]}' has no latency_ms")
    return tables, latency, against


TABLES, _LATENCY, _LATENCY_AGAINST = load_papers()
PAPER_TABLES = tuple(TABLES.values())
SATO_TABLE_3, SATO_TABLE_5 = TABLES["sato2020_table3"], TABLES["sato2020_table5"]
LIU_TABLE_2 = TABLES["liu2021_table2"]
DUAN_TABLE_3, DUAN_TABLE_4 = TABLES["duan2023_table3"], TABLES["duan2023_table4"]
DUAN_TABLE_5 = TABLES["duan2023_table5"]
GUO_TABLE_1 = TABLES["guo2020_table1"]
GUO_LATENCY_MS = _LATENCY["guo2020_table1"]  # Guo et al.'s Table 1 latency: ms a sentence, batch size 1, one 1080Ti
GUO_LATENCY_AGAINST = _LATENCY_AGAINST["guo2020_table1"]  # the Transformer: each faster row's claim is against it
