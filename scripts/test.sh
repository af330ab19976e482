#!/usr/bin/env bash
# Set up the virtualenv and run the whole test suite (extra arguments go to pytest).
# Tests use the real eval sets in $AREAL_DATA_DIR (default: ../shared/data beside the checkout) and
# start or use real services (Redis, Docker) where a test needs them; .ci/run starts those on CI.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
