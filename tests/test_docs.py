"""The documentation's example reward plugin works exactly as written."""
import re
import subprocess
import sys

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def code_blocks(markdown: str, language: str) -> list[str]:
    blocks = re.findall(rf"^( *)```{language}\n(.*?)^\1```", markdown, re.MULTILINE | re.DOTALL)
    return [re.sub(rf"^{indent}", "", body, flags=re.MULTILINE) for indent, body in blocks]


def test_contributing_example_plugin_installs_and_scores(tmp_path, areal):
    text = (REPO / "CONTRIBUTING.md").read_text()
    [pyproject] = [b for b in code_blocks(text, "toml") if "areal-contains" in b]
    [module] = [b for b in code_blocks(text, "python") if "register_rewards" in b]
    assert len([line for line in module.splitlines() if line.strip()]) <= 20
    package = tmp_path / "areal-contains"
    package.mkdir()
    (package / "pyproject.toml").write_text(pyproject)
    (package / "areal_contains.py").write_text(module)
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "--target", str(site), str(package)], check=True, capture_output=True)
    env = {"PYTHONPATH": str(site)}
    listed = areal("plugins", env=env)
    assert "contains" in listed.stdout and "areal-contains" in listed.stdout
    rows = tmp_path / "responses.jsonl"
    rows.write_text('{"reference": "Paris", "response": "It is Paris."}\n'
                    '{"reference": "Paris", "response": "it is paris"}\n')
    lenient = areal("score", "--reward", "contains", "--input", str(rows), env=env)
    assert "mean score 1.0000, correct 2/2" in lenient.stdout, lenient.stderr
    strict = areal("score", "--reward", "contains", "--input", str(rows), "--option", "case_sensitive=true", env=env)
    assert "mean score 0.5000, correct 1/2" in strict.stdout, strict.stderr


def test_contributing_audit_of_the_example_plugin_prints_what_the_guide_shows(tmp_path, areal, data_dir):
    text = (REPO / "CONTRIBUTING.md").read_text()
    [pyproject] = [b for b in code_blocks(text, "toml") if "areal-contains" in b]
    [module] = [b for b in code_blocks(text, "python") if "register_rewards" in b]
    [audit] = [b for b in code_blocks(text, "python") if "register_audit_mutators" in b]
    [shown] = [b for b in code_blocks(text, "console") if "areal audit" in b]
    package = tmp_path / "areal-contains"
    package.mkdir()
    (package / "pyproject.toml").write_text(pyproject)
    (package / "areal_contains.py").write_text(module + "\n\n" + audit)
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "--target", str(site), str(package)], check=True, capture_output=True)
    command = shown.splitlines()[0].removeprefix("$ areal ").split()
    result = areal("--data-dir", str(data_dir), *command, env={"PYTHONPATH": str(site), "COLUMNS": "100"})
    assert result.returncode == 1, result.stderr
    for line in shown.splitlines():  # the table's rows and the examples shown, as printed
        if line.startswith("│") or line.startswith("false positive"):
            assert line in result.stdout, line
    summary = re.search(r"\d+ variants of \d+ samples: \d+ false positives", shown).group(0)
    assert summary in result.stdout.replace("\n", " ")


def test_contributing_task_yaml_example_is_a_valid_spec_over_real_data(tmp_path, data_dir):
    from areal_core.tasks import Task, load_task_yaml

    text = (REPO / "CONTRIBUTING.md").read_text()
    [spec_text] = [b for b in code_blocks(text, "yaml") if "name: gsm8k" in b]
    (tmp_path / "gsm8k.yaml").write_text(spec_text)
    task = Task(load_task_yaml(tmp_path / "gsm8k.yaml"), data_dir)
    first = task.samples()[0]
    assert first["reference"] == "18"
    assert task.render_prompt(first)[0]["content"].endswith("Put the final answer in \\boxed{}.")
