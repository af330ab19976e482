"""What `pip install areal-core` ships: the package tree (the declarative task specs of `tasks/` inside it, as
`areal_core.tasks.specs`; the leaderboard template), and nothing of the repository around it."""
from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_the_wheel_holds_the_package_the_task_specs_and_the_templates_only(tmp_path):
    source = tmp_path / "source"  # a copy: an in-tree build would leave build/ in the checkout
    for part in ("areal_core", "tasks"):
        shutil.copytree(REPO / part, source / part, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    for part in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / part, source / part)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w",
                    str(tmp_path), str(source)], check=True, capture_output=True, text=True, timeout=300)
    [wheel] = tmp_path.glob("areal_core-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    specs = sorted(Path(n).name for n in names if n.startswith("areal_core/tasks/specs/") and n.endswith(".yaml"))
    assert specs == sorted(p.name for p in (REPO / "tasks").glob("*.yaml"))
    assert "areal_core/eval/templates/leaderboard.html" in names
    assert "areal_core/plugins/hookspecs.py" in names and "areal_core/engine/backends.py" in names
    top = {n.split("/")[0] for n in names}
    assert top == {"areal_core", *(n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info"))}
    assert not any("__pycache__" in n for n in names)
