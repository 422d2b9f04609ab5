#!/bin/bash
# Hardware in the loop over the simulated UART link (dwc hil --sim: core + link in Verilator, bit by bit)
# for each shipped MuJoCo DWC, compiled as its shipped hardware was (ECP5, deepest pipeline): 1 episode,
# 100 steps. Reports: BUILDS/<policy>/hil_report.json (copied here as <policy>.json); output: hil.log.
cd "$(dirname "$0")/../.."
BUILDS=${BUILDS:-/tmp/hilb}
for p in hopper-v5-dwc halfcheetah-v5-dwc walker2d-v5-dwc ant-v5-dwc humanoid-v5-dwc; do
  echo "== $p $(date +%T)"
  dwc compile policies/$p --out $BUILDS/$p --pipeline max --target ecp5-25k 2>&1 | tail -2
  /usr/bin/time -f "%e s wall" dwc hil $BUILDS/$p --sim --episodes 1 --max-steps 100 2>&1 | tail -6
done
echo "== end $(date +%T)"

# the Humanoid DWC's board top at 1 Mbaud, the rate its task's 15 ms control period needs
/usr/bin/time -f "%e s wall" dwc synth $BUILDS/humanoid-v5-dwc --board ulx3s --baud 1000000
