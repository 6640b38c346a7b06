#!/bin/bash
# The plm study's rows run as their stages run them (no DVC or Prefect); the Mask-Predict rows without the BERTs'
# pretraining: a `plms: false` model reads only the BERTs' vocabularies and sizes (vocab_only_berts.py makes those
# where data/models/plm has none; a row that reads the BERTs' weights is refused on them).
# In a plm workspace (`vocabridge profile plm` applied; data/corpora made by prepare@upstream and prepare@downstream):
#   bash results/plm-mask-predict/run.sh setup ROW...    the vocabularies, the downstream SentencePiece models, each
#                                                        row's model (abnet@UPSTREAM: mask-predict-upstream trains on
#                                                        the upstream pairs, resuming where it stopped) and record
#   bash results/plm-mask-predict/run.sh cell ROW SEED   one cell: transfer, fine-tune, evaluate (data/cells/ROW/sSEED)
#   bash results/plm-mask-predict/run.sh all ROW         setup, then the five seeds' cells two at a time at one thread
#                                                        each (params.yaml's seeds, 1 3 5 | 2 4), each skipped
#                                                        where its record is: after a stop the same command
#                                                        carries on (the upstream training from its checkpoint)
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
elif [ "$mode" = all ]; then
  row=$1
  bash "$here/run.sh" setup "$row"
  # params.yaml's seeds, alternately to two lanes (1 3 5 | 2 4)
  listed=$(python -c 'from vocabridge.config import load_params; print(*load_params("params.yaml").seeds)')
  read -r -a seeds <<< "$listed"
  lane() { for seed in "$@"; do
    [ -f "data/cells/$row/s$seed/record.json" ] && continue
    status=0
    VOCABRIDGE_THREADS=1 bash "$here/run.sh" cell "$row" "$seed" > "data/cells-$row-s$seed.log" 2>&1 || status=$?
    echo "run.sh: $row s$seed exit $status $(date -u '+%F %T') UTC (log data/cells-$row-s$seed.log)"
  done; }
  odd=(); even=()
  for i in "${!seeds[@]}"; do if (( i % 2 )); then even+=("${seeds[i]}"); else odd+=("${seeds[i]}"); fi; done
  lane "${odd[@]}" & lane "${even[@]}" & wait
else
  echo "usage: run.sh setup ROW... | run.sh cell ROW SEED | run.sh all ROW" >&2; exit 2
fi
