#!/usr/bin/env bash
# Set up the virtualenv and run the main job: `areal train` with no arguments, the CPU demo (tiny embedded
# model, supervised warm-up, asynchronous decoupled PPO on 3-digit addition, held-out accuracy before/after).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/areal train "$@"
