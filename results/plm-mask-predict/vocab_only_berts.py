"""The plm stage's BERT directories with untrained weights: its tokenizer (made from the text and the size alone,
the same on every run) and its configuration, which is all a `plms: false` model reads from them
(tests/test_plm.py::test_a_model_without_bert_reads_only_the_berts_vocabulary_and_sizes). Lets the Mask-Predict
rows run without the BERTs' pretraining. In a plm workspace:
    python results/plm-mask-predict/vocab_only_berts.py de en
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))

from stages.plm import vocabulary  # noqa: E402
from vocabridge import workspace as paths  # noqa: E402
from vocabridge.cbow import domain_text  # noqa: E402
from vocabridge.config import load_params  # noqa: E402
from vocabridge.fileio import sha256_file  # noqa: E402
from vocabridge.nmt.train import fingerprint_of  # noqa: E402
from vocabridge.plm.bert import build_bert, save_bert  # noqa: E402

params = load_params("params.yaml")
for code in sys.argv[1:]:
    spec, cfg = params.plms[code], params.plm
    sources = [sha256_file(paths.CORPORA / d / "stats.json") for d in ("upstream", "downstream")]
    folder = paths.CHECKPOINTS / "plm" / code / "tokenizer"
    fingerprint = fingerprint_of(code, spec.vocab_size, *sources)
    record = folder / "fingerprint.json"
    # a tokenizer made for these corpora is reused without their text (a lent GPU gets it without the mono text)
    reused = record.is_file() and json.loads(record.read_text(encoding="utf-8")) == fingerprint
    text = [] if reused else [line for domain in ("upstream", "downstream")
                              for line in domain_text(paths.CORPORA / domain, code)]
    tokenizer = vocabulary(text, spec.vocab_size, folder, fingerprint)
    save_bert(build_bert(cfg.arch, tokenizer, cfg.train.seed), tokenizer, paths.PLMS / code)
    # run.sh refuses a row that reads the BERTs' weights while this file is there; the plm stage replaces the folder
    (paths.PLMS / code / "VOCABULARY_ONLY").write_text("untrained weights: only the vocabulary and sizes are real\n")
    print(f"{paths.PLMS / code}: vocabulary of {len(tokenizer)} pieces, untrained weights")
