#!/bin/bash
# The plm study's rows run as their stages run them (no DVC or Prefect); the Mask-Predict rows without the BERTs'
# pretraining: a `plms: false` model reads only the BERTs' vocabularies and sizes (vocab_only_berts.py makes those
# where data/models/plm has none; a row that reads the BERTs' weights is refused on them).
# In a plm workspace (`vocabridge profile plm` applied; data/corpora made by prepare@upstream and prepare@downstream):
#   bash results/plm-mask-predict/run.sh setup ROW...    the vocabularies, the downstream SentencePiece models, each
#                                                        row's model (abnet@UPSTREAM: mask-predict-upstream trains on
#                                                        the upstream pairs, resuming where it stopped) and record
#   bash results/plm-mask-predict/run.sh cell ROW SEED   one cell: transfer, fine-tune, evaluate (data/cells/ROW/sSEED)
# Threads: VOCABRIDGE_THREADS (1 for cells that pool with the committed ones).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} TOKENIZERS_PARALLELISM=false
mode=$1; shift
upstream_of() { python - "$1" <<'PY'
import sys
from pathlib import Path
from vocabridge.config import load_params
from vocabridge.transfer import knobs_for
params = load_params("params.yaml")
upstream = knobs_for(sys.argv[1], params.rows).upstream
if params.abnets[upstream].plms is not False and any(Path("data/models/plm", c, "VOCABULARY_ONLY").exists()
                                                     for c in (params.lang.src, params.lang.tgt)):
    sys.exit(f"rows.{sys.argv[1]}: abnets.{upstream} reads the BERTs' weights, and data/models/plm holds "
             "vocabularies only (vocab_only_berts.py): train the BERTs first (python -m stages.plm LANG)")
print(upstream)
PY
}
if [ "$mode" = setup ]; then
  for code in de en; do
    [ -f data/models/plm/$code/config.json ] || python "$here/vocab_only_berts.py" $code
  done
  [ -d data/spm/downstream ] || python -m stages.spm downstream
  for row in "$@"; do
    upstream=$(upstream_of "$row")
    python -m stages.abnet "$upstream"
    python -m stages.row "$row"
  done
elif [ "$mode" = cell ]; then
  python -m stages.transfer "$1" "$2" && python -m stages.finetune "$1" "$2" && python -m stages.evaluate "$1" "$2"
else
  echo "usage: run.sh setup ROW... | run.sh cell ROW SEED" >&2; exit 2
fi
