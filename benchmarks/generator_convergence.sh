#!/usr/bin/env bash
# The embedding generator towards convergence (Liu et al. 2021, Fig. 4: about 20k steps) on a GPU, at the scale of
# the profile in params.yaml: trains the upstream model if data/models/upstream/base is not there yet (the pretrain
# stage, as `dvc repro pretrain` runs it), then benchmarks/generator_steps.py on the GPU: zero-shot dev BLEU and
# perplexity of the patt-eg-kd initial model at growing step counts, the generator's training loss curve, and curve.png
# drawn from both (benchmarks/plot_generator_curve.py).
#
#   dvc repro spm          # the corpora and the vocabularies first
#   OUT=results/generator-convergence bash benchmarks/generator_convergence.sh
#
# Knobs (environment): OUT (where the tables go), DEVICE (default cuda), THREADS (default 8), VARIANT (default
# patt-kd), STEPS, BUDGET_S (generator training seconds; step counts that would not fit are skipped),
# PRETRAIN_TIMEOUT_S, FINETUNE_SEEDS (e.g. "1 2 3": fine-tune each initial model with these seeds and report its
# best dev BLEU, as Liu et al.'s Fig. 4; none by default).
set -euo pipefail
out=${OUT:-results/generator-convergence}
device=${DEVICE:-cuda}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
python - > "$out/machine.txt" <<'EOF'
import platform, torch, transformers
gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
print(f"gpu: {gpu}\ncpu capability: {torch.backends.cpu.get_cpu_capability()}\ncores: {__import__('os').cpu_count()}\n"
      f"python {platform.python_version()}, torch {torch.__version__}, transformers {transformers.__version__}")
EOF
cat "$out/machine.txt"
if [ ! -f data/models/upstream/base/model.safetensors ]; then
  start=$SECONDS
  timeout "${PRETRAIN_TIMEOUT_S:-300}" python -m stages.pretrain 2> "$out/pretrain.log"
  echo "pretrain: $((SECONDS - start)) s on $device"
fi
cp data/metrics/pretrain.json "$out/pretrain.json"
python benchmarks/generator_steps.py --device "$device" --threads "${THREADS:-8}" --variant "${VARIANT:-patt-kd}" \
  --steps ${STEPS:-0 250 500 1000 2000 4000 8000 12000 16000 20000} --budget-s "${BUDGET_S:-380}" \
  --csv "$out/curve.csv" --log-csv "$out/loss.csv" --finetune-seeds ${FINETUNE_SEEDS:-} 2> "$out/generator.log"
python benchmarks/plot_generator_curve.py "$out"
