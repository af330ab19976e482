"""The documentation's example reward plugin works exactly as written."""
import re
import subprocess
import sys

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def code_blocks(markdown: str, language: str) -> list[str]:
    blocks = re.findall(rf"^( *)```{language}\n(.*?)^\1```", markdown, re.MULTILINE | re.DOTALL)
    return [re.sub(rf"^{indent}", "", body, flags=re.MULTILINE) for indent, body in blocks]


def install_module_plugin(tmp_path, name: str, module: str) -> Path:
    """A guide's one-module plugin `areal_NAME`, pip-installed (entry point NAME) into a directory of its own."""
    package = tmp_path / f"areal-{name}"
    package.mkdir()
    (package / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=68"]\nbuild-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "areal-{name}"\nversion = "0.1.0"\n'
        f'[project.entry-points.areal]\n{name} = "areal_{name}"\n')
    (package / f"areal_{name}.py").write_text(module)
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "--target", str(site), str(package)], check=True, capture_output=True)
    return site


def test_contributing_example_plugin_installs_and_scores(tmp_path, areal):
    text = (REPO / "CONTRIBUTING.md").read_text()
    [pyproject] = [b for b in code_blocks(text, "toml") if "areal-contains" in b]
    [module] = [b for b in code_blocks(text, "python") if "def contains_reference" in b]
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
    [module] = [b for b in code_blocks(text, "python") if "def contains_reference" in b]
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


def test_contributing_async_judge_example_scores_through_a_real_http_judge(tmp_path, areal):
    """The guide's `async def` judge, installed as a plugin, grades through a judge server answering HTTP."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    text = (REPO / "CONTRIBUTING.md").read_text()
    [module] = [b for b in code_blocks(text, "python") if "async def judge" in b]

    class Judge(BaseHTTPRequestHandler):
        def do_POST(self):
            asked = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            body = json.dumps({"score": float(asked["answer"].strip() == "4"), "judge": "test"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    class Server(ThreadingHTTPServer):
        request_queue_size = 256  # the reward's 64 calls at once connect together (the default backlog is 5)

    server = Server(("127.0.0.1", 0), Judge)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    site = install_module_plugin(tmp_path, "judge", module)
    rows = tmp_path / "responses.jsonl"
    rows.write_text("".join(json.dumps({"question": "2+2?", "response": answer}) + "\n" for answer in ["4", " 4", "5"] * 20))
    try:
        scored = areal("score", "--reward", "judge", "--input", str(rows), "--workers", "1",
                       "--option", f"url=http://127.0.0.1:{server.server_port}/grade", env={"PYTHONPATH": str(site)})
    finally:
        server.shutdown()
    assert "scored 60 rows with reward 'judge': mean score 0.6667, correct 40/60, errors 0" in scored.stdout, scored.stderr


def test_contributing_workflow_and_tool_example_runs_an_eval_with_transcripts(tmp_path, areal, data_dir):
    """The guide's workflow and tool, installed as a plugin: listed, and an `areal eval` of a task that names the
    workflow keeps both policy turns and the nudge between them in each sample's transcript."""
    import json

    import yaml

    from areal_core.engine.model import init_model

    text = (REPO / "CONTRIBUTING.md").read_text()
    [module] = [b for b in code_blocks(text, "python") if "async def double_check" in b]
    site = install_module_plugin(tmp_path, "check", module)
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "checked.yaml").write_text(yaml.safe_dump({
        "name": "checked", "dataset": {"generator": "arithmetic", "size": 3, "options": {"split": "test"}},
        "prompt": {"template": "{{ question }}"}, "reward": {"name": "arithmetic"},
        "workflow": {"name": "double_check", "options": {"nudge": " Sure? "}}, "eval": {"max_new_tokens": 4}}))
    env = {"PYTHONPATH": str(site), "AREAL_TASKS_PATH": str(tasks), "AREAL_EVAL_DB": str(tmp_path / "db.sqlite")}
    listed = areal("plugins", env={**env, "COLUMNS": "200"})
    assert "tool:word_count" in listed.stdout and "workflow:double_check" in listed.stdout
    model = init_model(tmp_path / "model", hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                       num_key_value_heads=1, intermediate_size=64)
    out = tmp_path / "out"
    run = areal("eval", "--model", str(model), "--tasks", "checked", "--output-dir", str(out), env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    samples = [json.loads(line) for line in (out / "model" / "checked.samples.jsonl").read_text().splitlines()]
    assert len(samples) == 3
    for sample in samples:
        assert [(t["role"], t["text"] if t["role"] == "user" else "") for t in sample["transcript"]] == [
            ("assistant", ""), ("user", " Sure? "), ("assistant", "")]
