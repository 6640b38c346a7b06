#!/bin/bash
# The plm study's Mask-Predict rows, run as their stages run them (no DVC or Prefect), without the BERTs'
# pretraining: a `plms: false` model reads only the BERTs' vocabularies and sizes (vocab_only_berts.py).
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
from vocabridge.config import load_params
from vocabridge.transfer import knobs_for
print(knobs_for(sys.argv[1], load_params("params.yaml").rows).upstream)
PY
}
if [ "$mode" = setup ]; then
  for code in de en; do
    [ -f data/models/plm/$code/config.json ] || python "$here/vocab_only_berts.py" $code
  done
  [ -d data/spm/downstream ] || python -m stages.spm downstream
  for row in "$@"; do
    python -m stages.abnet "$(upstream_of "$row")"
    python -m stages.row "$row"
  done
elif [ "$mode" = cell ]; then
  python -m stages.transfer "$1" "$2" && python -m stages.finetune "$1" "$2" && python -m stages.evaluate "$1" "$2"
else
  echo "usage: run.sh setup ROW... | run.sh cell ROW SEED" >&2; exit 2
fi
