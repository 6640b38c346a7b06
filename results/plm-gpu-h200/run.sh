#!/bin/bash
# The plm study's cells on a lent GPU, as stages run them (no DVC or Prefect there).
#   bash .sitting/run.sh start WAIT    unpack .sitting/in.tgz into /tmp/ws, rebuild the rows' upstream models from the
#                                      carried BERTs, start the queue of cells (it outlives the call), wait WAIT s, pack
#   bash .sitting/run.sh collect WAIT  wait up to WAIT s more for the queue, pack again
# Packs to $OUT/back.tgz: data/cells (finished cells), the stages' metrics, curves, logs. A row whose upstream model
# trains here (abnets.NAME.upstream true: mask-predict-upstream) trains it in its setup, on the GPU, and its cells wait
# for it (the other rows' start at once); the trained model comes back as $OUT/upstream-NAME.tgz.aa, .ab, ... (15 MB
# parts: `cat upstream-NAME.tgz.* | tar xz` in a plm workspace), so that its cells can run on a CPU afterwards.
# BERTs carried as tokenizers alone (bundle.sh of a workspace with vocab_only_berts.py's BERTs) are remade here.
# Environment: CELLS ("row seed" lines; default: the cells the study still lacks), ROWS (default: CELLS' rows),
# PARALLEL (cells at once, default 4), START_BY (no cell starts later than this many seconds after the setup began,
# default 420: an AB-Net cell needs about 270 s from transfer to record and a plm-nmt cell about 500 s, four at once,
# and the lease's two calls leave about 780 s; a cell started later converges but is still being scored when the
# lease ends, and its model does not come back. For plm-nmt cells, START_BY=280).
set -u
mode=$1; wait_s=$2
T0=$(date +%s)
R=$(pwd); W=${WS:-/tmp/ws}
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false PYTHONPATH=$W HF_HUB_OFFLINE=1 VOCABRIDGE_THREADS=4
CELLS=${CELLS:-"abnet 5
abnet-enc 4
abnet-enc 5
mask-predict 4
mask-predict 5"}
ROWS=${ROWS:-$(printf '%s\n' "$CELLS" | awk 'NF {print $1}' | sort -u | tr '\n' ' ')}
export START_BY=${START_BY:-420} PARALLEL=${PARALLEL:-4}

pack() {
  cd $W || return
  for f in logs/abnet-*.log logs/*-s*.log; do
    [ -f "$f" ] && printf '%s: %s\n' "$f" "$(tr '\r' '\n' < "$f" | grep -E 'upd/s|BLEU|Error|error' | tail -1)"
  done > $OUT/progress.txt
  tar czf $OUT/back.tgz data/cells data/metrics data/plots data/diagnostics data/rows logs 2>/dev/null
  cp logs/done.txt $OUT/done.txt 2>/dev/null
  for m in data/metrics/abnet/*.json; do  # upstream models trained here, once each
    r=$(basename "$m" .json)
    if [ -f "$m" ] && [ ! -f "$OUT/upstream-$r.tgz.aa" ] && python3 -c "import json, sys
sys.exit(json.load(open(sys.argv[1])).get('updates', 0) == 0)" "$m"; then
      tar czf - "data/models/upstream/$r" "$m" "data/plots/abnet/$r" | split -b 15M - "$OUT/upstream-$r.tgz."
    fi
  done
  ls -la $OUT
}

if [ "$mode" = start ]; then
  mkdir -p $W/logs && cd $W
  tar -C $R --exclude=./.sitting -cf - . | tar -xf -
  tar xzf $R/.sitting/in.tgz
  tar xzf git.tgz && git remote remove origin 2>/dev/null; git config --unset-all extensions.partialclone 2>/dev/null
  git reset -q 2>&1 | tail -1
  echo "commit: $(git rev-parse HEAD 2>&1) dirty: $(git status --porcelain --untracked-files=no 2>&1 | head -3)" > $OUT/setup.log
  { nvidia-smi -L; nproc; free -g | head -2; python3 -c "import torch, transformers, sacrebleu, sentencepiece, tokenizers
print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0), 'capability', torch.backends.cpu.get_cpu_capability())
print('transformers', transformers.__version__, 'tokenizers', tokenizers.__version__, 'sacrebleu', sacrebleu.__version__, 'sentencepiece', sentencepiece.__version__)"; } >> $OUT/setup.log 2>&1
  setup_row() {
    r=$1
    python3 -m stages.abnet $r > logs/abnet-$r.log 2>&1 || { echo "abnet $r failed"; tail -3 logs/abnet-$r.log; }
    # the BERTs' config.json records the transformers version that wrote it: the CPU study's own
    for f in data/models/upstream/$r/*/config.json; do cp cpu-config.json "$f"; done
    python3 -m stages.row $r > logs/row-$r.log 2>&1 || { echo "row $r failed"; tail -3 logs/row-$r.log; }
    if [ ! -f rows-cpu/$r.json ]; then echo "$r: no CPU record of this row to compare with"
    elif cmp -s data/rows/$r.json rows-cpu/$r.json; then echo "$r: upstream model and row record identical to the CPU study's"
    else echo "$r: row record DIFFERS from the CPU study's"; diff data/rows/$r.json rows-cpu/$r.json | head -6; fi
  }
  if [ -f .sitting-vocab_only_berts.py ]; then
    python3 .sitting-vocab_only_berts.py de en > logs/berts.log 2>&1 || { echo "BERT vocabularies failed"; tail -3 logs/berts.log; }
  fi >> $OUT/setup.log
  # each row's cells start when its setup is done (logs/ready-ROW), so a row that trains upstream holds back no
  # other; the setups, like the queue, outlive this call
  export T0
  { declare -f setup_row; cat <<'EOF'
setup_row $1 > logs/setup-$1.txt 2>&1
echo "$1 setup ended $(( $(date +%s) - T0 )) s after the setup began" >> logs/done.txt
touch logs/ready-$1
EOF
  } > setup.sh
  for r in $ROWS; do setsid nohup bash setup.sh $r > /dev/null 2>&1 < /dev/null & done
  cat > queue.sh <<'EOF'
cell() {
  r=$1; s=$2; log=logs/$r-s$s.log
  while [ ! -f logs/ready-$r ]; do sleep 5; done
  t=$(date +%s)
  if [ $(( t - T0 )) -gt "$START_BY" ]; then
    echo "$r $s not started: $(( t - T0 )) s after the setup began, past START_BY=$START_BY" >> logs/done.txt; return
  fi
  { python3 -m stages.transfer $r $s && python3 -m stages.finetune $r $s && python3 -m stages.evaluate $r $s; } > $log 2>&1
  echo "$r $s rc=$? seconds=$(( $(date +%s) - t )) start=$(( t - T0 )) end=$(( $(date +%s) - T0 ))" >> logs/done.txt
}
export -f cell
nvidia-smi dmon -s um -d 15 > logs/dmon.txt 2>&1 &
xargs -P "$PARALLEL" -L 1 bash -c 'cell "$0" "$1"' < cells.txt
echo ALL DONE >> logs/done.txt
EOF
  printf '%s\n' "$CELLS" > cells.txt
  [ "${QUEUE:-1}" = 1 ] && setsid nohup bash queue.sh > logs/queue.log 2>&1 < /dev/null &
else
  cd $W || exit 1
fi
while [ $(( $(date +%s) - T0 )) -lt "$wait_s" ] && ! grep -q "ALL DONE" logs/done.txt 2>/dev/null; do sleep 5; done
cat $OUT/setup.log logs/setup-*.txt 2>/dev/null
pack
cat $OUT/done.txt 2>/dev/null; cat $OUT/progress.txt
