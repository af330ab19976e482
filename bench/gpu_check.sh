#!/usr/bin/env bash
# The GPU check (issue 22; bench/gpu_check.py says what it measures): the local engine and trainer on CUDA with
# the 0.5B preset, every figure in one folder. No network is needed on the GPU machine.
#
#   bash bench/gpu_check.sh --prepare [DIR]    # on a machine with the eval data ($AREAL_DATA_DIR) and .venv:
#                                              # DIR/tokenizer (the preset's BPE tokenizer, ~1 MB; default DIR
#                                              # .gpu-check, which gpu_check.py looks in)
#   bash bench/gpu_check.sh --out DIR          # on the GPU machine, with .gpu-check/ copied beside the code:
#                                              # sized for 8 minutes on one H200 (not run on one yet)
#   bash bench/gpu_check.sh --tiny --out DIR   # the same code at small sizes, on a CPU (the test suite runs it)
#
# Python: $PYTHON, else .venv/bin/python, else python3. Where areal-core is not installed (a GPU machine's
# image holds torch, transformers, peft, ... but not this project), it is installed without dependencies and
# without the network into a folder on PYTHONPATH, with the plugins the check uses and any wheels in
# .gpu-check/wheels (packages that image lacks).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi

if [ "${1:-}" = "--prepare" ]; then   # --prepare [DIR]: DIR/tokenizer (default .gpu-check/tokenizer)
  "$PYTHON" -c "
import os, sys
from areal_core.engine.presets import preset_tokenizer, save_tokenizer
path = save_tokenizer(preset_tokenizer('qwen2.5-0.5b', os.environ.get('AREAL_DATA_DIR')), sys.argv[1] + '/tokenizer')
print(f'gpu_check: wrote {path} (carry it to the GPU machine with the working tree)')" "${2:-.gpu-check}"
  exit 0
fi

if ! "$PYTHON" -c "import areal_core, areal_arithmetic" 2>/dev/null; then
  site="${TMPDIR:-/tmp}/areal-gpu-check-site"
  wheels=()
  if [ -d .gpu-check/wheels ]; then wheels=(.gpu-check/wheels/*.whl); fi
  echo "gpu_check: installing areal-core and the arithmetic plugin (no dependencies, no network) into $site"
  "$PYTHON" -m pip install --quiet --no-index --no-deps --no-build-isolation --no-compile --upgrade \
    --target "$site" . plugins/arithmetic "${wheels[@]}"
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
exec env PYTHONUNBUFFERED=1 "$PYTHON" bench/gpu_check.py "$@"
