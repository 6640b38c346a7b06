#!/bin/bash
# The size-all study's workspace remade on a new machine, then the grid's missing cells (README.md, "Made in a
# workspace"). Run from a checkout of main with its .venv installed (README's install):
#   bash results/size-all/remake.sh setup WS   a workspace at 22387d3 with `vocabridge profile size-all`: corpora,
#                                              SentencePiece, the base model bit for bit (3e0788e3...: bf16 on
#                                              oneDNN's AVX-512 bf16 kernels, docs/grid.md), CBOW and the generator,
#                                              each checked against what the committed cells started from
#   bash results/size-all/remake.sh run WS     the flow over every row and seed, skipping the cells this folder
#                                              holds and collecting each new one into it as it finishes
# Refused on a CPU without native bf16: there the base model's bf16 training is emulated, days instead of an hour.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
main=$(git -C "$here" rev-parse --show-toplevel)
mode=${1:?usage: remake.sh setup|run WORKSPACE}
ws=${2:?usage: remake.sh setup|run WORKSPACE}
commit=22387d3
export PATH=$main/.venv/bin:$PATH PYTHONPATH=$ws TOKENIZERS_PARALLELISM=false
# the base model the committed cells started from (3e0788e3...), as their records name it
base_sha=$(python -c 'import json, sys; print(json.load(open(sys.argv[1]))["upstream"]["sha256"])' \
  "$here/cells/ft-tgtv-random/s1/record.json")

if [ "$mode" = setup ]; then
  python - <<'PY'
import sys
import torch
if not torch.ops.mkldnn._is_mkldnn_bf16_supported():
    sys.exit(f"remake.sh: this CPU ({torch.backends.cpu.get_cpu_capability()}) has no native bf16: the base model "
             "(trained in bf16) cannot be remade here in useful time (docs/grid.md)")
PY
  [ -d "$ws/.git" ] || { git clone -q "$main" "$ws" && git -C "$ws" checkout -q "$commit"; }
  cd "$ws"
  [ "$(git rev-parse --short=7 HEAD)" = "$commit" ] || { echo "remake.sh: $ws is not at $commit" >&2; exit 1; }
  git diff --quiet params.yaml && vocabridge profile size-all
  nice dvc repro --single-item prepare@upstream prepare@downstream spm@upstream spm@downstream
  weights=data/models/upstream/base/model.safetensors
  if [ ! -f "$weights" ] || [ "$(sha256sum "$weights" | cut -d' ' -f1)" != "$base_sha" ]; then
    # bf16 pinned for this stage alone (`auto` may pick fp32 where a probe times bf16 slower: another model), on
    # oneDNN's AVX-512 bf16 kernels (AMX sums in another order); params.yaml back to `auto` afterwards
    cp params.yaml params.yaml.auto
    python - <<'PY'
from pathlib import Path
text = Path("params.yaml").read_text()
start = text.index("\npretrain:\n")
at = text.index("    bf16: auto", start)
Path("params.yaml").write_text(text[:at] + "    bf16: true" + text[at + len("    bf16: auto"):])
from vocabridge.config import load_params
assert load_params("params.yaml").pretrain.train.bf16 is True
PY
    ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 nice python -m stages.pretrain || { mv params.yaml.auto params.yaml; exit 1; }
    mv params.yaml.auto params.yaml
    got=$(sha256sum "$weights" | cut -d' ' -f1)
    [ "$got" = "$base_sha" ] || { echo "remake.sh: $weights is $got, not the study's $base_sha" >&2; exit 1; }
    dvc commit -f pretrain
  fi
  ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 nice dvc repro --single-item cbow generator
  cmp data/plots/generator.csv "$main/results/study/curves/generator.csv" \
    || { echo "remake.sh: the generator's curve differs from results/study/curves/generator.csv" >&2; exit 1; }
  echo "remake.sh: $ws ready; next: bash $0 run $ws"
elif [ "$mode" = run ]; then
  cd "$ws"
  results=$main/results/size-all
  export PREFECT_HOME=${PREFECT_HOME:-$ws/../prefect-size-all} PREFECT_SERVER_ANALYTICS_ENABLED=false DO_NOT_TRACK=1
  export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=120
  exec nice python -m flows.pipeline --jobs 2 --seeds 1 2 3 4 5 --missing "$results" --collect "$results"
else
  echo "usage: remake.sh setup|run WORKSPACE" >&2; exit 2
fi
