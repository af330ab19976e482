#!/usr/bin/env bash
# Set up (or refresh) the project virtualenv .venv: CPU torch first, then areal-core, every plugin in
# plugins/, the sandbox, each with its test extra, all editable. Safe to run again.
#   PYTHON=python3.11 bash scripts/setup.sh     # choose the interpreter
#   TORCH_SPEC="torch==2.13.0" (default)        # what to install as torch, before anything can pull another
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
pip_install() { .venv/bin/python -m pip install --quiet --disable-pip-version-check "$@" 2>&1 | grep -v "is ignored: it is neither" || true; }

[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
pip_install -U pip
pip_install "$TORCH_SPEC"
packages=(-e ".[test]")
for project in plugins/*/pyproject.toml sandbox/pyproject.toml; do
  [ -f "$project" ] && packages+=(-e "$(dirname "$project")[test]")
done
pip_install "${packages[@]}"
.venv/bin/python -c "import torch, areal_core; print(f'areal-core {areal_core.__version__} ready (torch {torch.__version__})')"
