#!/usr/bin/env bash
# Set up (or refresh) the project virtualenv .venv: CPU torch first, then areal-core, every plugin in
# plugins/, the sandbox, each with its test extra, all editable. Safe to run again; one line per step.
#   PYTHON=python3.11 bash scripts/setup.sh     # choose the interpreter
#   TORCH_SPEC="torch==2.13.0" (default)        # what to install as torch, before anything can pull another
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
say() { echo "setup: $*"; }
pip_install() {  # quiet pip that still fails the script when pip fails
  PIP_ROOT_USER_ACTION=ignore .venv/bin/python -m pip install --quiet --disable-pip-version-check "$@" 2>&1 \
    | { grep -v "is ignored: it is neither" || true; }  # this machine's pip config names index dirs it lacks
  return "${PIPESTATUS[0]}"
}

if [ -x .venv/bin/python ]; then
  say ".venv exists ($(.venv/bin/python --version))"
else
  "$PYTHON" -m venv .venv
  say "created .venv ($(.venv/bin/python --version))"
fi
pip_install -U pip
say "pip $(.venv/bin/python -m pip --version | cut -d' ' -f2)"
pip_install "$TORCH_SPEC"
say "torch $(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("torch"))')"  # not imported yet: numpy comes next
packages=(-e ".[test]")
names=(areal-core)
for project in plugins/*/pyproject.toml sandbox/pyproject.toml; do
  [ -f "$project" ] && packages+=(-e "$(dirname "$project")[test]") && names+=("$(basename "$(dirname "$project")")")
done
pip_install "${packages[@]}"
say "installed editable with test extras: ${names[*]}"
.venv/bin/python -c "import torch, areal_core; print(f'setup: areal-core {areal_core.__version__} ready (torch {torch.__version__})')"
