#!/bin/bash
# Here, beside run.sh: the bundle it unpacks on the lent machine, from a plm workspace WS (default /work/plm-ws): its
# params.yaml, the two BERTs (data/models/plm), the downstream corpora without their mono text,
# the downstream SentencePiece models, the CPU's row records (run.sh compares its own against those of its CELLS' rows), one BERT
# config.json as the CPU wrote it, and a blob-less shallow clone's .git (so a cell records its commit). Writes
# .sitting/in.tgz in the checkout; .git/info/exclude lists /.sitting/, and the device call carries it.
# BERTs of ../plm-mask-predict/vocab_only_berts.py (untrained: the Mask-Predict rows read only their vocabularies)
# travel as their tokenizers alone, with that script, which remakes them there in seconds. UPSTREAM=1 adds the
# upstream pairs (train and dev), for a row whose upstream model trains there (mask-predict-upstream).
set -eu
WS=${WS:-/work/plm-ws}
T=$(mktemp -d)
mkdir -p $T/data/corpora/downstream $T/data/corpora/upstream $T/data/spm $T/data/models $T/rows-cpu .sitting
cp $WS/params.yaml $T/
if ls $WS/data/models/plm/*/VOCABULARY_ONLY > /dev/null 2>&1; then
  for dir in $WS/data/checkpoints/plm/*/tokenizer; do
    code=$(basename "$(dirname "$dir")") && mkdir -p $T/data/checkpoints/plm/$code && cp -a "$dir" $T/data/checkpoints/plm/$code/
  done
  cp "$(dirname "$0")/../plm-mask-predict/vocab_only_berts.py" $T/.sitting-vocab_only_berts.py
else
  cp -a $WS/data/models/plm $T/data/models/
fi
cp $WS/data/corpora/upstream/stats.json $T/data/corpora/upstream/
[ "${UPSTREAM:-0}" = 1 ] && (cd $WS/data/corpora/upstream && cp -a train.* dev.* $T/data/corpora/upstream/)
cp -a $WS/data/spm/downstream $T/data/spm/
(cd $WS/data/corpora/downstream && cp -a dev.* test.* train.* stats.json $T/data/corpora/downstream/)
cp $WS/data/rows/*.json $T/rows-cpu/
configs=($WS/data/models/upstream/*/source/config.json) && cp "${configs[0]}" $T/cpu-config.json
git -c protocol.file.allow=always clone -q --depth 1 --filter=blob:none --no-checkout \
  --upload-pack="git -c uploadpack.allowFilter=true upload-pack" "file://$(pwd)" $T/shallow
tar czf $T/git.tgz -C $T/shallow .git && rm -rf $T/shallow
tar czf .sitting/in.tgz -C $T . && rm -rf $T
cp "$(dirname "$0")/run.sh" .sitting/run.sh
du -sh .sitting
