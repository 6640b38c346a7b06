#!/usr/bin/env bash
# The tiny profile's DAG at two commits, one thread a stage, one stage at a time; then their cells compared.
set -u
export PATH=/work/main/.venv/bin:$PATH DVC_NO_ANALYTICS=1 VOCABRIDGE_THREADS=1
mkdir -p /work/bi/downloads
for side in before after; do
  cd /work/bi/$side || exit 1
  python -m vocabridge.cli profile tiny >/dev/null
  sed -i "s|^  download_dir:.*|  download_dir: /work/bi/downloads|" params.yaml
  start=$(date +%s)
  nice -n 5 dvc repro > /work/bi/$side.log 2>&1
  echo "$side: dvc repro exit $? in $(( $(date +%s) - start )) s" >> /work/bi/summary.txt
done
