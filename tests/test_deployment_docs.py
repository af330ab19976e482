"""docs/deployment.md and examples/configs/ say only what the code accepts.

Every example config loads with `areal train CONFIG --print-config` and keeps the values it sets; every
`areal ...` command line the guide quotes names a real subcommand and real options (checked against that
command's `--help`), and its `areal train` overrides resolve; the guide's SGLang launch lines carry the
flags our launcher passes. Fast: no network, no GPU, no training.
"""
from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
GUIDE = REPO / "docs" / "deployment.md"
CONFIGS = sorted((REPO / "examples" / "configs").glob("*.yaml"))
ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def shell_lines(markdown: str) -> list[str]:
    """The command lines of the ```bash / ```console blocks: continuations joined, `$ ` prompts dropped."""
    lines: list[str] = []
    for block in re.findall(r"^```(?:bash|console|sh)\n(.*?)^```", markdown, re.MULTILINE | re.DOTALL):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            line = line.strip()
            lines.append(line[2:] if line.startswith("$ ") else line)
    return lines


def command_parts(line: str) -> tuple[dict[str, str], list[str]]:
    """The VAR=value assignments that set the environment of the line's command, and the command's words (after
    those and any `nohup`)."""
    try:
        words = shlex.split(line, comments=True)
    except ValueError:
        return {}, []
    env: dict[str, str] = {}
    while words and (ENV_ASSIGNMENT.match(words[0]) or words[0] == "nohup"):
        if words[0] != "nohup":
            name, value = words[0].split("=", 1)
            env[name] = value
        words = words[1:]
    return env, words


def command_words(line: str, program: str) -> list[str] | None:
    """The words after `program` when the line runs it (after any VAR=value assignments and `nohup`), else None."""
    _, words = command_parts(line)
    return words[1:] if words and words[0] == program else None


def areal_commands() -> list[list[str]]:
    found = [words for line in shell_lines(GUIDE.read_text()) if (words := command_words(line, "areal")) is not None]
    return [words for words in found if words]


_HELP: dict[tuple[str, ...], str] = {}


def help_text(areal, *path: str) -> str:
    """`areal PATH... --help`, run once per subcommand."""
    if path not in _HELP:
        result = areal(*path, "--help", timeout=120)
        assert result.returncode == 0, f"`areal {' '.join(path)} --help` failed:\n{result.stderr}"
        _HELP[path] = result.stdout
    return _HELP[path]


def subcommands(help_output: str) -> set[str]:
    section = help_output.split("\nCommands:\n", 1)
    if len(section) == 1:
        return set()
    return {line.split()[0] for line in section[1].splitlines() if line.startswith("  ") and line.split()}


def split_command(areal, words: list[str]) -> tuple[list[str], list[str]]:
    """(subcommand path, the remaining words) of `areal WORDS...`, walking the command groups' --help."""
    path: list[str] = []
    rest = list(words)
    while rest and not rest[0].startswith("-"):
        names = subcommands(help_text(areal, *path))
        if not names:
            break
        assert rest[0] in names, f"`areal {' '.join(path + rest)}`: {rest[0]!r} is not a subcommand (have {sorted(names)})"
        path.append(rest.pop(0))
    return path, rest


def test_the_guide_quotes_areal_commands():
    commands = areal_commands()
    assert len(commands) >= 8
    assert {"train", "worker", "serve", "score", "sandbox"} <= {words[0] for words in commands}


@pytest.mark.parametrize("config", CONFIGS, ids=[c.name for c in CONFIGS])
def test_example_config_loads_and_keeps_its_values(config, areal):
    result = areal("train", str(config), "--print-config", timeout=120)
    assert result.returncode == 0, result.stderr
    resolved = yaml.safe_load(result.stdout)

    def check(expected: dict, actual: dict, where: str) -> None:
        for key, value in expected.items():
            assert key in actual, f"{config.name}: {where}{key} is missing from the resolved config"
            if isinstance(value, dict) and value:
                check(value, actual[key], f"{where}{key}.")
            else:
                assert actual[key] == value, f"{config.name}: {where}{key} = {actual[key]!r}, the file says {value!r}"

    check(yaml.safe_load(config.read_text()), resolved, "")


def test_every_areal_command_in_the_guide_names_a_real_subcommand_and_real_options(areal):
    for words in areal_commands():
        path, rest = split_command(areal, words)
        assert path, f"`areal {' '.join(words)}` names no subcommand"
        text = help_text(areal, *path)
        for word in rest:
            if re.match(r"^--?[A-Za-z]", word):
                option = word.split("=", 1)[0]
                assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text), \
                    f"`areal {' '.join(words)}`: {option} is not an option of `areal {' '.join(path)}`"


def test_every_areal_train_line_in_the_guide_resolves_to_a_config():
    from areal_core.config import load_config
    from areal_core.rl.config import TrainConfig

    lines = [words[1:] for words in areal_commands() if words[0] == "train"]
    assert lines
    for words in lines:
        path, overrides, rest = None, [], list(words)
        while rest:
            word = rest.pop(0)
            if word == "--resume":
                rest.pop(0)  # a run directory that exists only on the cluster
            elif word.startswith("-"):
                continue
            elif "=" in word:
                overrides.append(word)
            else:
                assert word.endswith((".yaml", ".yml")), f"`areal train {' '.join(words)}`: unexpected {word!r}"
                path = REPO / word
                assert path.is_file(), f"`areal train {' '.join(words)}`: {word} does not exist"
        load_config(TrainConfig, path, overrides)  # raises ConfigError naming the bad key or value


def test_the_guides_sglang_launch_lines_carry_the_launchers_flags_and_environment(monkeypatch):
    from areal_core.engine.launch import ServerProcess

    monkeypatch.delenv("SGLANG_TIMEOUT_KEEP_ALIVE", raising=False)
    server = ServerProcess.sglang("/models/m", 30000, host="0.0.0.0", python="python")
    launcher = server.command
    assert launcher[:3] == ["python", "-m", "sglang.launch_server"]
    flags = {word for word in launcher[3:] if word.startswith("--")}
    settings = {name: value for name, value in server.env.items() if os.environ.get(name) != value}  # it adds
    assert "SGLANG_TIMEOUT_KEEP_ALIVE" in settings
    lines = [(line, words) for line in shell_lines(GUIDE.read_text())
             if (words := command_words(line, "python")) is not None and words[:2] == ["-m", "sglang.launch_server"]]
    assert lines, "the guide shows no `python -m sglang.launch_server` line"
    for line, words in lines:
        missing = flags - set(words)
        assert not missing, f"`python {' '.join(words)}` lacks {sorted(missing)}, which ServerProcess.sglang passes"
        unset = {name: value for name, value in settings.items() if command_parts(line)[0].get(name) != value}
        assert not unset, f"`{line}` does not set {unset}, which ServerProcess.sglang sets"
