#!/usr/bin/env bash
# Set up the virtualenv, bring up every service the tests use, and run the whole test suite (extra arguments
# go to pytest). On a new machine this installs what is missing (needs root for apt and dockerd): Redis, the
# Docker engine and the offline sandbox image, headless Chromium, the real SGLang server's virtualenv (see
# scripts/services.sh); when all of it is there already it takes seconds. Tests use the real eval sets in
# $AREAL_DATA_DIR (default: ../shared/data beside the checkout).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/services.sh
# One test file per worker process (--dist loadfile keeps a file's module fixtures, e.g. its servers, in one
# process), as many workers as cores, at most 4: much of the suite waits on processes, servers and Docker, so
# even 2 cores run it ~1.45x faster. AREAL_TEST_WORKERS=0 runs it in this process.
exec .venv/bin/python -m pytest -n "${AREAL_TEST_WORKERS:-auto}" --maxprocesses 4 --dist loadfile --durations 30 "$@"
