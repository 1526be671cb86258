#!/usr/bin/env bash
# Set up, then run the built-in CPU co-evolution demo (SmolLM2-135M-Instruct in both roles, a frozen copy as
# judge; configs/demo-cpu.yaml) and write its HTML report. Extra arguments are config overrides, e.g. schedule.cycles=3.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_DISABLE_TELEMETRY=1
out=runs/demo-$(date +%Y%m%d-%H%M%S)
echo "evolm demo: in $out/report.html, its per-phase summary: rubric validity (1.0: every rubric parses), the rubric" \
     "step's reward spread (std; not 0: the writer has a signal) and the judge's pair accuracy with its n (near" \
     "chance for a 135M judge). Each step takes minutes: the bar counts the tokens generated within it."
.venv/bin/evolm train --config configs/demo-cpu.yaml output_dir="$out" "$@"
.venv/bin/evolm report "$out"
