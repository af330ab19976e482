"""The plugin system end to end: real distributions, real entry points, the real `areal` CLI."""
import json


def plugins_json(areal, env=None):
    result = areal("plugins", "--json", env=env)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    return {p["name"]: p for p in data["plugins"]}, data["problems"]


def test_builtin_arithmetic_plugin_is_listed_with_version_and_hooks(areal):
    plugins, problems = plugins_json(areal)
    arithmetic = plugins["arithmetic"]
    assert arithmetic["distribution"] == "areal-arithmetic"
    assert arithmetic["version"] == "0.1.0"
    assert {"register_rewards", "register_tasks", "register_generators"} <= set(arithmetic["hooks"])
    assert "reward:arithmetic" in arithmetic["provides"]
    assert arithmetic["error"] is None


def test_third_party_plugin_appears_and_its_reward_scores_files(areal, with_plugins, tmp_path):
    env = with_plugins("testkit")
    plugins, _ = plugins_json(areal, env)
    assert plugins["testkit"]["distribution"] == "areal-testkit"
    assert plugins["testkit"]["version"] == "0.0.7"
    assert "reward:shout" in plugins["testkit"]["provides"]

    rows = tmp_path / "in.jsonl"
    rows.write_text('{"reference": "HI", "response": "hi"}\n{"reference": "HI", "response": "ho"}\n')
    result = areal("score", "--reward", "shout", "--input", str(rows), env=env)
    assert result.returncode == 0, result.stderr
    assert "mean score 0.5000, correct 1/2, errors 0" in result.stdout


def test_plugin_adds_a_cli_subcommand(areal, with_plugins):
    env = with_plugins("testkit")
    assert "testkit-hello" in areal("--help", env=env).stdout
    result = areal("testkit-hello", "ada", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "hello ada from testkit"


def test_plugin_that_fails_to_import_is_reported_and_skipped(areal, with_plugins):
    env = with_plugins("broken_import", "testkit")
    plugins, _ = plugins_json(areal, env)
    error = plugins["broken_import"]["error"]
    assert "areal_dependency_that_does_not_exist" in error and "ModuleNotFoundError" in error
    assert plugins["testkit"]["error"] is None
    table = areal("plugins", env=env)
    assert table.returncode == 0
    assert "broken_import" in table.stdout and "failed" in table.stdout
    # The rest of the CLI keeps working with the other plugins.
    assert areal("testkit-hello", "x", env=env).stdout.strip() == "hello x from testkit"


def test_plugin_with_misspelt_hook_is_reported(areal, with_plugins):
    plugins, _ = plugins_json(areal, with_plugins("bad_hook"))
    error = plugins["bad_hook"]["error"]
    assert error.startswith("invalid hook") and "register_reward" in error


def test_plugin_whose_registration_hook_raises_is_reported(areal, with_plugins):
    plugins, problems = plugins_json(areal, with_plugins("raising_hook"))
    assert "RuntimeError: config file ~/.raising missing" in plugins["raising_hook"]["error"]
    assert any("raising_hook" in p for p in problems)


def test_duplicate_reward_name_is_an_error_naming_both_plugins(areal, with_plugins, tmp_path):
    env = with_plugins("testkit", "dupe")
    _, problems = plugins_json(areal, env)
    assert any("'shout'" in p and "'testkit'" in p and "'dupe'" in p for p in problems), problems
    rows = tmp_path / "in.jsonl"
    rows.write_text('{"reference": "HI", "response": "hi"}\n')
    result = areal("score", "--reward", "shout", "--input", str(rows), env=env)
    assert result.returncode == 2
    assert "registered twice" in result.stderr and "'testkit'" in result.stderr and "'dupe'" in result.stderr
    assert "Traceback" not in result.stderr


def test_areal_plugins_env_restricts_which_plugins_load(areal, with_plugins):
    env = with_plugins("testkit", "broken_import", AREAL_PLUGINS="testkit")
    plugins, _ = plugins_json(areal, env)
    assert set(plugins) == {"testkit"}
    plugins, problems = plugins_json(areal, with_plugins(AREAL_PLUGINS="nosuchplugin"))
    assert plugins == {}
    assert any("nosuchplugin" in p for p in problems)
