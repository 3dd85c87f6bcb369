#!/usr/bin/env bash
# Learner tokens/s against the same model, batch, optimizer and thread count in PyTorch
# (Debian's python3-torch, installed if missing), both measured in this run.
# Usage: bench/train_vs_pytorch.sh [--batch N]
set -euo pipefail
cd "$(dirname "$0")/.."
batch=64
if [ "${1:-}" = "--batch" ]; then batch=$2; fi
scripts/install-deps.sh --bench >/dev/null
scripts/build.sh >/dev/null
ours=$(build/bench/bench_train --batch "$batch")
echo "$ours"
# Debian's torch is installed for the system interpreter, not for any python3 earlier on PATH.
torch=$(/usr/bin/python3 bench/train_torch.py --batch "$batch" --threads 1)
echo "pytorch_$torch"
ours_tps=$(echo "$ours" | sed -n 's/^tokens_per_s=//p')
torch_tps=${torch#tokens_per_s=}
awk -v a="$ours_tps" -v b="$torch_tps" 'BEGIN { printf "ratio_vs_pytorch=%.2f\n", a / b }'
