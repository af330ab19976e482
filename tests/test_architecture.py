"""The shape of the code, checked: the import layers of pyproject.toml (`lint-imports`), no backend chosen by
an if/else ladder in core, no function too long to read, and task specs that say which plugin they need."""
from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent

CORE = REPO / "areal_core"
ROUTE_TABLES = {("engine/server.py", "build_app")}  # one nested function per HTTP route
MAX_FUNCTION_LINES = 80


def test_the_import_contracts_hold():
    """Layers (cli > rl > eval > workflows > tasks > engine | rewards > plugins | config > basics), eval and engine never
    importing rl, no import cycle at any depth, and plugins above the core (see [tool.importlinter])."""
    lint = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run([str(lint), "--no-cache", "--no-logo"], cwd=REPO, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout and "6 kept" in result.stdout


def test_no_backend_is_chosen_by_comparing_its_name_in_core():
    """Backends are looked up by name in the plugin registry; nothing in core compares a backend name."""
    ladder = re.compile(r"\bbackend\s*(==|!=|\bin\b|\bnot in\b)|(==|!=)\s*\w*\.backend\b")
    found = [f"{path.relative_to(REPO)}:{number}: {line.strip()}"
             for path in sorted(CORE.rglob("*.py"))
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if ladder.search(line.split("#")[0])]
    assert found == []


def test_no_function_in_core_is_longer_than_a_screen():
    long = []
    for path in sorted(CORE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                where = (str(path.relative_to(CORE)), node.name)
                if lines > MAX_FUNCTION_LINES and where not in ROUTE_TABLES:
                    long.append(f"{where[0]}:{node.lineno} {node.name}: {lines} lines")
    assert long == []


def test_the_step_loop_of_a_training_run_fits_one_screen():
    source = (CORE / "rl" / "run.py").read_text()
    train = next(node for node in ast.walk(ast.parse(source))
                 if isinstance(node, ast.AsyncFunctionDef) and node.name == "train")
    assert train.end_lineno - train.lineno + 1 <= 50


def test_every_builtin_task_spec_names_the_installed_plugin_that_provides_its_reward():
    from areal_core.plugins import get_plugin_manager
    from areal_core.rewards import reward_registry

    distribution = {name: info.distribution for name, info in get_plugin_manager().plugins.items()}
    specs = sorted((REPO / "tasks").glob("*.yaml"))
    assert len(specs) == 10
    for path in specs:
        reward = yaml.safe_load(path.read_text())["reward"]
        assert reward.get("plugin") == distribution[reward_registry().get(reward["name"]).plugin], path.name


def test_a_task_whose_reward_plugin_is_absent_is_listed_unavailable_naming_the_plugin_to_install(areal, tmp_path):
    env = {"AREAL_PLUGINS": "arithmetic"}
    listed = areal("tasks", "--json", "--no-size", env=env)
    assert listed.returncode == 0, listed.stderr
    rows = {row["name"]: row for row in json.loads(listed.stdout)}
    assert rows["arithmetic"]["available"] is True
    assert rows["gsm8k"]["available"] is False
    assert rows["gsm8k"]["unavailable"] == "its reward 'math' is not installed; install it with `pip install areal-math`"
    assert rows["humaneval"]["unavailable"].endswith("`pip install areal-code`")
    table = areal("tasks", "--no-size", env={**env, "COLUMNS": "250"})
    assert "math (unavailable: pip install areal-math)" in table.stdout

    train = areal("train", "task=gsm8k", "eval_task=null", f"output_dir={tmp_path}", env=env)
    assert train.returncode == 2 and list(tmp_path.iterdir()) == []  # nothing written
    assert ("error: task 'gsm8k' is unavailable: its reward 'math' is not installed; install it with "
            "`pip install areal-math`") in train.stderr
