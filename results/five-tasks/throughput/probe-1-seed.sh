#!/bin/bash
# quick throughput probe: SPS over env steps 1000-2000 (updates from step 1000), 1 seed, 1 thread, float32
cd /work/main
probe() { name=$1; shift; rm -rf /work/tp/$name; s=$(date +%s); .venv/bin/dwc train --steps 2000 --learning-starts 1000 --eval-episodes 1 --threads 1 --precision float32 --no-progress --out /work/tp/$name "$@" > /work/tp/$name.log 2>&1; e=$(date +%s); echo "$name $(grep '"step": 2000' /work/tp/$name/metrics.jsonl | grep -o '"charts/SPS": [0-9.]*') wall $((e-s))" >> /work/tp/results.txt; }
probe ant-mlp --env Ant-v5 --policy mlp
probe ant-dense63 --env Ant-v5 --policy dwc --width 256
probe ant-sparse63 --env Ant-v5 --policy dwc --width 256 --wiring-optim sparse
probe ant-dense15 --env Ant-v5 --policy dwc --width 256 --thermo-bits 15
probe hum-sparse63 --env Humanoid-v5 --policy dwc --width 256 --wiring-optim sparse
probe hum-dense15 --env Humanoid-v5 --policy dwc --width 256 --thermo-bits 15
probe walker-dense63 --env Walker2d-v5 --policy dwc --width 256
probe ant-random63 --env Ant-v5 --policy dwc --width 256 --wiring random
