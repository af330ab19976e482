#!/usr/bin/env bash
# Set up the virtualenv and run the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/areal plugins
.venv/bin/areal tasks
.venv/bin/areal score --reward arithmetic --input examples/arithmetic_responses.jsonl --output runs/demo/scored.jsonl
