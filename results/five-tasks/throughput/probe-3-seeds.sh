#!/bin/bash
cd /work/main
while pgrep -f /work/tp/run.sh >/dev/null; do sleep 5; done
probek() { name=$1; shift; rm -rf /work/tp/$name; s=$(date +%s); .venv/bin/dwc train --seeds 1-3 --steps 2000 --learning-starts 1000 --eval-episodes 1 --threads 1 --precision float32 --no-progress --out /work/tp/$name "$@" > /work/tp/$name.log 2>&1; e=$(date +%s); echo "$name $(grep '"step": 2000' /work/tp/$name/seed1/metrics.jsonl | grep -o '"charts/SPS": [0-9.]*') wall $((e-s))" >> /work/tp/results.txt; }
probek ant-dense63-k3 --env Ant-v5 --policy dwc --width 256
probek ant-sparse63-k3 --env Ant-v5 --policy dwc --width 256 --wiring-optim sparse
probek walker-dense63-k3 --env Walker2d-v5 --policy dwc --width 256
probek ant-mlp-k3 --env Ant-v5 --policy mlp
