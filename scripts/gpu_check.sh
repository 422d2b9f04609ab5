#!/usr/bin/env bash
# Every check that needs a CUDA GPU, in one run (CI machines have none):
#   1. the CUDA tests: each actor type gives the same outputs and gradients on CPU and CUDA; SAC
#      updates replayed as CUDA graphs equal eager ones; SAC and PPO train, resume and evaluate with
#      --device cuda; CUDA-trained checkpoints compile to the IR; seeds trained together (--seeds) on CUDA;
#   2. `dwc train` with the default --device auto picks the GPU;
#   3. scripts/bench_train.py --device cuda: SB3 vs our MLP vs the DWC actor, side by side, in float32
#      (what --precision auto picks on a GPU) and with --precision bfloat16 (not yet measured on one);
#   4. scripts/bench_seeds.py --device cuda: 8 SAC seeds in one process (dwc train --seeds 1-8) against
#      8 processes sharing the GPU, MLP and DWC actors (target: >= 3x the aggregate env-steps/s).
# Usage: scripts/gpu_check.sh OUT_DIR [quick]   (with dwc installed: pip install -e ".[test,bench]")
# Logs and the benchmarks' JSON land in OUT_DIR; each step has its own time limit (about 37 minutes of limits in all).
# quick: the same checks cut for one short slot on a lent GPU (step limits 170 + 110 + 130 + 100 s; not yet run on one): the CUDA tests, then 1 and 4 at K = 8
# (the issue's targets) with the benchmarks' default budgets, and 3 at width 256 only.
set -uo pipefail
out=${1:?usage: scripts/gpu_check.sh OUT_DIR [quick]}
quick=${2:-}
mkdir -p "$out"
py=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
step() {  # step NAME SECONDS CMD...: run with a limit, keep its log, report its exit status
    local name=$1 limit=$2; shift 2
    echo "== $name"
    timeout "$limit" "$@" > "$out/$name.log" 2>&1
    local rc=$?
    tail -n 25 "$out/$name.log"
    echo "== $name: exit $rc"
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
$py -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())"
if [ "$quick" = quick ]; then
    step test-cuda 170 $py -m pytest -q -p no:cacheprovider -rs -x tests/test_models.py tests/test_train.py \
        tests/test_multiseed.py -k cuda
    step bench-seeds-mlp 110 $py scripts/bench_seeds.py --device cuda --env Hopper-v5 --policy mlp --ks 8 --rounds 1 \
        --target 3 --json "$out/bench_seeds_cuda_mlp.json"
    step bench-seeds-dwc 130 $py scripts/bench_seeds.py --device cuda --env Hopper-v5 --policy dwc --width 256 --ks 8 \
        --rounds 1 --target 3 --json "$out/bench_seeds_cuda_dwc256.json"
    step bench-256 100 $py scripts/bench_train.py --device cuda --dwc-width 256 --rounds 1 \
        --which mlp,dwc-learnable,dwc-sparse --json "$out/bench_cuda_256.json"
    exit 0
fi
step test-models 90 $py -m pytest -q -p no:cacheprovider -rs tests/test_models.py
step test-train-cuda 200 $py -m pytest -q -p no:cacheprovider -rs tests/test_train.py -k cuda
step test-multiseed-cuda 200 $py -m pytest -q -p no:cacheprovider -rs tests/test_multiseed.py -k cuda
step bench-256 150 $py scripts/bench_train.py --device cuda --dwc-width 256 --rounds 1 \
    --which sb3,mlp,mlp-eager,dwc-random,dwc-learnable --json "$out/bench_cuda_256.json"
step bench-1024 150 $py scripts/bench_train.py --device cuda --dwc-width 1024 --rounds 1 \
    --which mlp,dwc-random,dwc-learnable --json "$out/bench_cuda_1024.json"
step bench-1024-bf16 150 $py scripts/bench_train.py --device cuda --dwc-width 1024 --rounds 1 --precision bfloat16 \
    --which mlp,dwc-learnable --json "$out/bench_cuda_1024_bf16.json"
step bench-seeds-mlp 600 $py scripts/bench_seeds.py --device cuda --env Hopper-v5 --policy mlp --ks 8 --rounds 1 \
    --target 3 --json "$out/bench_seeds_cuda_mlp.json"
step bench-seeds-dwc 600 $py scripts/bench_seeds.py --device cuda --env Hopper-v5 --policy dwc --width 256 --ks 8 \
    --rounds 1 --target 3 --json "$out/bench_seeds_cuda_dwc256.json"
step auto-device 60 $py -m dwc train --env InvertedPendulum-v5 --steps 400 --learning-starts 200 \
    --width 64 --lut-inputs 4 --thermo-bits 7 --eval-episodes 2 --no-progress --out "$out/auto-run"
rm -rf "$out/auto-run"
