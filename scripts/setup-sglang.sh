#!/usr/bin/env bash
# Create (or refresh) .venv-sglang: a separate virtualenv with a real SGLang server that runs on this CPU.
# tests/engine/test_sglang_real.py launches it to check the SGLang client against the real thing (it skips,
# saying so, when .venv-sglang is missing). Safe to run again. About 3.5 GB.
#
#   bash scripts/setup-sglang.sh
#   SGLANG_SPEC="sglang==0.5.23" TORCH_SPEC="torch==2.13.0" PYTHON=python3.11 bash scripts/setup-sglang.sh
#
# How, and why (SGLang ships for CUDA; its CPU path works with care):
# - SGLang is installed with --no-deps; then the requirements it declares (read from the installed
#   distribution's metadata) are installed under the constraint TORCH_SPEC, less those in SKIP below:
#   CUDA-only kernels and libraries, and packages that would pin another torch build.
# - PyPI's torchvision is CUDA-linked: its C++ operators cannot load beside a CPU torch, and its import then
#   fails while registering fake kernels for them. SGLang imports torchvision at start-up (multimodal
#   helpers), so the matching torchvision is installed without dependencies and that registration module is
#   emptied: its Python transforms work, its C++ ops (nms, roi_align, ...) say they are unavailable.
# - sgl-kernel has no CPU wheel; the few functions SGLang's CPU text path imports from it are provided by a
#   test-only pure-torch stand-in, tests/engine/sglang_cpu_shim, which the tests put on PYTHONPATH.
# On GPU machines install SGLang the ordinary way instead (`pip install sglang`).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
SGLANG_SPEC=${SGLANG_SPEC:-sglang==0.5.23}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
VENV=.venv-sglang
SKIP="torch sglang-kernel flashinfer-python cuda-python nvidia-cutlass-dsl nvidia-mathdx nvshmem4py-cu13
flash-attn-4 humming-kernels quack-kernels sgl-deep-ep sgl-deep-gemm sgl-flash-mla tilelang torch-memory-saver
apache-tvm-ffi kernels torchvision torchaudio torchcodec timm av decord2 deepseek-recipe tml-renderers py-spy"

pip_install() {  # quiet pip that still fails the script when pip fails
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$@" 2>&1 \
    | { grep -v -e "is ignored: it is neither" -e "^sglang .* requires " -e "dependency resolver does not currently" || true; }
  return "${PIPESTATUS[0]}"
}

started=$(date +%s)
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
echo "*" > "$VENV/.gitignore"   # never committed, whatever the repository's .gitignore says
pip_install -U pip packaging
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "$TORCH_SPEC" > "$work/constraints.txt"
pip_install -c "$work/constraints.txt" "$TORCH_SPEC"
pip_install --no-deps "$SGLANG_SPEC"
SKIP="$SKIP" "$VENV/bin/python" - "$SGLANG_SPEC" > "$work/requirements.txt" <<'EOF'
import os, re, sys
from importlib.metadata import requires
from packaging.requirements import Requirement

skip = set(os.environ["SKIP"].split())
for line in requires(Requirement(sys.argv[1]).name) or []:
    req = Requirement(line)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue  # an optional extra, or another platform
    if re.sub(r"[-_.]+", "-", req.name).lower() not in skip:
        print(str(req).split(";")[0].strip())
EOF
pip_install -c "$work/constraints.txt" -r "$work/requirements.txt"

# torchvision matching torch (2.N <-> 0.(N+15)), Python parts only (see above).
TORCHVISION_SPEC=${TORCHVISION_SPEC:-$("$VENV/bin/python" -c \
  "import torch; minor = int(torch.__version__.split('.')[1]); print(f'torchvision==0.{minor + 15}.*')")}
pip_install --no-deps "$TORCHVISION_SPEC"
"$VENV/bin/python" - <<'EOF'
import importlib.util, pathlib
registrations = pathlib.Path(importlib.util.find_spec("torchvision").submodule_search_locations[0]) / "_meta_registrations.py"
registrations.write_text("# Emptied by scripts/setup-sglang.sh: this torchvision's C++ operators (CUDA-linked) cannot\n"
                         "# load beside a CPU torch, and registering fake kernels for them fails at import.\n")
EOF

"$VENV/bin/python" - <<'EOF'
import sys, torch, torchvision, sglang
print(f"{sys.prefix}: sglang {sglang.__version__} ready (torch {torch.__version__}, torchvision "
      f"{torchvision.__version__}, Python parts only)")
EOF
echo "setup-sglang.sh took $(( $(date +%s) - started ))s"
