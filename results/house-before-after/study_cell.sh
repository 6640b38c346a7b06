#!/usr/bin/env bash
# One `study` cell (distill-random, seed 1) rerun at HEAD on the study workspace's upstream models, one thread a
# stage; the prepared downstream corpus, its vocabularies and CBOW vectors remade too; then compared with the
# cell the study workspace made before the house work (commit 5ecd87d).
set -u
export PATH=/work/main/.venv/bin:$PATH DVC_NO_ANALYTICS=1 VOCABRIDGE_THREADS=1
cd /work/bi/study-after || exit 1
ln -sfn /work/ws-study/data/downloads data/downloads
start=$(date +%s)
for st in prepare@downstream spm@downstream cbow row@distill-random transfer@distill-random-1 \
          finetune@distill-random-1 evaluate@distill-random-1; do
  echo "== $st $(date +%T)"
  nice -n 5 dvc repro -s -f "$st" || { echo "FAILED $st"; exit 1; }
done
echo "done in $(( $(date +%s) - start )) s"
