#!/bin/bash
# Here, beside run.sh: the bundle it unpacks on the lent machine, from a plm workspace WS (default /work/plm-ws) whose
# BERTs (data/models/plm) are trained: its params.yaml, the two BERTs, the downstream corpora without their mono text,
# the downstream SentencePiece models, the CPU's row records (run.sh compares its own against those of its CELLS' rows), one BERT
# config.json as the CPU wrote it, and a blob-less shallow clone's .git (so a cell records its commit). Writes
# .sitting/in.tgz in the checkout; .git/info/exclude lists /.sitting/, and the device call carries it.
set -eu
WS=${WS:-/work/plm-ws}
T=$(mktemp -d)
mkdir -p $T/data/corpora/downstream $T/data/spm $T/data/models $T/rows-cpu
cp $WS/params.yaml $T/
cp -a $WS/data/models/plm $T/data/models/
cp -a $WS/data/spm/downstream $T/data/spm/
(cd $WS/data/corpora/downstream && cp -a dev.* test.* train.* stats.json $T/data/corpora/downstream/)
cp $WS/data/rows/*.json $T/rows-cpu/
configs=($WS/data/models/upstream/*/source/config.json) && cp "${configs[0]}" $T/cpu-config.json
git -c protocol.file.allow=always clone -q --depth 1 --filter=blob:none --no-checkout \
  --upload-pack="git -c uploadpack.allowFilter=true upload-pack" "file://$(pwd)" $T/shallow
tar czf $T/git.tgz -C $T/shallow .git && rm -rf $T/shallow
mkdir -p .sitting && tar czf .sitting/in.tgz -C $T . && rm -rf $T
cp "$(dirname "$0")/run.sh" .sitting/run.sh
du -sh .sitting
