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


DEFAULT_PLUGINS = {"builtin-engines", "builtin-reward-backends", "builtin-trainers", "builtin-audit",
                   "builtin-workflows"}


def test_areal_plugins_env_restricts_which_plugins_load(areal, with_plugins):
    env = with_plugins("testkit", "broken_import", AREAL_PLUGINS="testkit")
    plugins, _ = plugins_json(areal, env)
    assert set(plugins) == {"testkit"} | DEFAULT_PLUGINS
    plugins, problems = plugins_json(areal, with_plugins(AREAL_PLUGINS="nosuchplugin"))
    assert set(plugins) == DEFAULT_PLUGINS  # areal-core's own backends load whatever AREAL_PLUGINS says
    assert any("nosuchplugin" in p for p in problems)


def test_the_builtin_backends_are_default_plugins_listed_with_what_they_provide(areal):
    plugins, problems = plugins_json(areal, {"AREAL_PLUGINS": ""})
    assert problems == []
    provided = {name: sorted(plugins[name]["provides"]) for name in DEFAULT_PLUGINS}
    assert provided == {"builtin-engines": ["engine:local", "engine:server", "engine:sglang"],
                        "builtin-reward-backends": ["reward-backend:celery", "reward-backend:local"],
                        "builtin-trainers": ["trainer:fsdp", "trainer:local"],
                        "builtin-audit": ["audit:*:degenerate"],
                        "builtin-workflows": ["tool:calculator", "workflow:feedback", "workflow:sampled_lengths",
                                              "workflow:single_turn", "workflow:tool_calls"]}
    assert all(plugins[name]["builtin"] and plugins[name]["distribution"] == "areal-core" and
               plugins[name]["error"] is None for name in DEFAULT_PLUGINS)
    table = areal("plugins", env={"AREAL_PLUGINS": "", "COLUMNS": "200"})
    assert "builtin-engines (default)" in table.stdout and "engine:sglang" in table.stdout


def test_a_notification_hook_that_raises_is_warned_about_and_the_other_plugins_are_still_called(tmp_path):
    """Notifications go through pluggy (`manager.hook.on_train_step(...)`); a plugin that raises in one is
    reported as a warning and does not stop the call reaching the others."""
    import warnings

    from areal_core import hookimpl
    from areal_core.plugins import PluginManager

    seen = []

    class Listener:
        @hookimpl
        def on_train_step(self, step, policy_version, metrics, run_dir):
            seen.append(step)

    class Broken:
        @hookimpl(tryfirst=True)
        def on_train_step(self, step):
            raise RuntimeError("disk full")

    manager = PluginManager()
    manager.register(Listener(), "listener")
    manager.register(Broken(), "broken")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        manager.hook.on_train_step(step=3, policy_version=3, metrics={}, run_dir=str(tmp_path))
    assert seen == [3]
    assert [str(w.message) for w in caught] == ["plugin 'broken': hook on_train_step raised RuntimeError: disk full"]


def test_hook_wrappers_see_registration_hooks_called_through_pluggy():
    """Registration goes through pluggy too: a plugin's wrapper around `register_rewards` runs around every
    other plugin's implementation, and each registration is credited to the plugin that made it."""
    from areal_core import hookimpl
    from areal_core.plugins import PluginManager

    calls = []

    class Wrapper:
        @hookimpl(wrapper=True)
        def register_rewards(self, register):
            calls.append("before")
            result = yield
            calls.append("after")
            return result

    class Provider:
        @hookimpl
        def register_rewards(self, register):
            calls.append("provider")
            register("echo", lambda sample, response: True)

    manager = PluginManager()
    manager.register(Provider(), "provider")
    manager.register(Wrapper(), "wrapper")
    registry = manager.registry("register_rewards", "reward", lambda plugin, name, fn: (name, (plugin, fn)))
    assert calls == ["before", "provider", "after"]
    assert registry.get("echo")[0] == "provider" and registry.plugin("echo") == "provider"
