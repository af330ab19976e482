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
# The test files are spread over 2 worker processes (pytest-xdist; --dist loadfile keeps a file's module
# fixtures, e.g. its servers, in one): ~55 min on 2 cores instead of ~67 in one process, which CI's 90 need.
# AREAL_TEST_WORKERS=N (or auto; at most 4) changes the count, 0 runs the suite in this one process. Tests with
# time limits hold under that load: sandbox limits are CPU time, Celery visibility timeouts are generous.
exec .venv/bin/python -m pytest -n "${AREAL_TEST_WORKERS:-2}" --maxprocesses 4 --dist loadfile --durations 30 "$@"
