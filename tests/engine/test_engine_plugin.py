"""An engine backend added by a plugin (tests/fixtures/plugins/enginekit: the local engine behind a scheduler of
its own), used by `areal train` and `areal eval` through the registry, with no change to areal-core."""
from __future__ import annotations

import asyncio
import json

import pytest

from areal_core.engine.protocol import GenerateRequest, SamplingParams

TRAIN = ["steps=2", "warmup.enabled=false", "rollout.batch_size=4", "rollout.group_size=4", "eval.limit=12",
         "tensorboard=false", "checkpoint_every=0"]


def test_the_plugin_engine_backend_is_listed_and_unknown_backends_are_errors_naming_the_registered_ones(
        areal, with_plugins, tiny_model):
    listing = json.loads(areal("plugins", "--json", env=with_plugins("enginekit")).stdout)
    enginekit = next(p for p in listing["plugins"] if p["name"] == "enginekit")
    assert enginekit["provides"] == ["engine:shortest_first"] and enginekit["error"] is None

    train = areal("train", "engine.backend=nosuch", "--print-config", env=with_plugins("enginekit"))
    assert train.returncode == 2
    assert ("engine: backend 'nosuch' is not a registered engine backend (registered: local, server, "
            "sglang, shortest_first; plugins add more, see `areal plugins`)") in train.stderr
    evaluated = areal("eval", "--model", f"nosuch:{tiny_model}", "--tasks", "arithmetic-test",
                      env=with_plugins("enginekit"))
    assert evaluated.returncode == 2 and "'nosuch' is not an engine backend" in evaluated.stderr
    assert "NAME: local, server, sglang, shortest_first" in evaluated.stderr


def test_areal_train_and_areal_eval_run_on_the_plugin_engine(areal, with_plugins, tmp_path):
    log = tmp_path / "served.log"
    env = with_plugins("enginekit", AREAL_ENGINEKIT_LOG=str(log), AREAL_CACHE_DIR=str(tmp_path / "cache"),
                       OMP_NUM_THREADS="1")
    trained = areal("train", f"output_dir={tmp_path / 'runs'}", "engine.backend=shortest_first",
                    "engine.options={max_concurrent: 8}", *TRAIN, env=env, timeout=600)
    assert trained.returncode == 0, trained.stderr[-3000:]
    [run_dir] = (tmp_path / "runs").iterdir()
    assert run_dir.name.startswith("arithmetic-embedded-")  # named after the task and the model
    summary = json.loads((run_dir / "summary.json").read_text())
    served_in_training = len(log.read_text().splitlines())
    assert summary["engine_servers"] == [{"url": "in-process", "scheduler": "shortest_first",
                                          "served": served_in_training, "max_concurrent": 8}]
    assert served_in_training >= 2 * 4 * 4 + 2 * 2 * 12  # two batches of rollouts, greedy + sampled evals twice

    # The run's last weights, on the plugin engine: listed as <run>@step2, samples equal the local engine's.
    log.unlink()
    weights = run_dir / "weights" / "v2"
    common = ["--tasks", "arithmetic-test", "--limit", "12", "--n", "2", "--temperature", "1", "--max-new-tokens",
              "8", "--quiet"]
    plugin = areal("eval", "--model", f"shortest_first:{weights}", *common, "--db", str(tmp_path / "a.sqlite"),
                   "--output-dir", str(tmp_path / "plugin"), env=env, timeout=300)
    assert plugin.returncode == 0, plugin.stderr[-3000:]
    assert len(log.read_text().splitlines()) == 24
    local = areal("eval", "--model", str(weights), *common, "--db", str(tmp_path / "b.sqlite"),
                  "--output-dir", str(tmp_path / "local"), env=env, timeout=300)
    assert local.returncode == 0, local.stderr[-3000:]
    name = f"{run_dir.name}@step2"
    metrics = {}
    for where in ("plugin", "local"):
        metrics[where] = json.loads((tmp_path / where / name / "arithmetic-test.metrics.json").read_text())
        samples = (tmp_path / where / name / "arithmetic-test.samples.jsonl").read_text().splitlines()
        metrics[where]["responses"] = [json.loads(line)["response"] for line in samples]
    assert metrics["plugin"]["manifest"]["model_ref"] == f"shortest_first:{weights}"
    assert metrics["plugin"]["manifest"]["model"] == metrics["local"]["manifest"]["model"] == name
    assert metrics["plugin"]["responses"] == metrics["local"]["responses"]
    assert len(set(metrics["plugin"]["responses"])) > 12  # sampled: distinct responses, not one repeated string


def test_the_plugin_scheduler_admits_the_shortest_prompt_first(plugin_dirs, monkeypatch, tiny_model):
    """Its own scheduling, for real: with one request admitted at a time, requests that arrive while the first
    runs are served shortest prompt first, not in arrival order."""
    monkeypatch.syspath_prepend(str(plugin_dirs["enginekit"]))
    from areal_enginekit import ShortestFirstEngine

    from areal_core.engine.local import LocalEngine

    lengths = [9, 2, 6, 4, 7]

    async def run():
        inner = LocalEngine(tiny_model, max_running_requests=4).start()
        engine = ShortestFirstEngine(inner, max_concurrent=1)
        finished = []

        async def one(i, length):
            params = SamplingParams(max_new_tokens=24, temperature=1.0, ignore_eos=True, seed=i)
            await engine.generate(GenerateRequest([7] * length, params, rid=f"r{i}"))
            finished.append(length)

        try:
            first = asyncio.create_task(one(0, 12))
            await asyncio.sleep(0)  # the first request is admitted before the others arrive
            await asyncio.gather(first, *(one(i + 1, n) for i, n in enumerate(lengths)))
        finally:
            await engine.close()
        return finished

    assert asyncio.run(run()) == [12, *sorted(lengths)]


def test_a_plugin_backend_rejects_options_it_does_not_know(areal, with_plugins, tiny_model, tmp_path):
    result = areal("train", f"output_dir={tmp_path}", "engine.backend=shortest_first", "engine.options={turbo: 1}",
                   f"model.path={tiny_model}", *TRAIN, env=with_plugins("enginekit", OMP_NUM_THREADS="1"))
    assert result.returncode == 2
    assert "engine.options: the shortest_first backend knows ['max_concurrent'], not ['turbo']" in result.stderr


@pytest.mark.parametrize("backend", ["local", "server"])
def test_a_builtin_backend_rejects_engine_options(areal, tiny_model, tmp_path, backend):
    result = areal("train", f"output_dir={tmp_path}", f"engine.backend={backend}", "engine.options={turbo: 1}",
                   f"model.path={tiny_model}", *TRAIN, env={"OMP_NUM_THREADS": "1"})
    assert result.returncode == 2
    assert f"engine backend {backend!r} takes no engine.options, got ['turbo']" in result.stderr


def test_an_engine_backend_that_yields_no_inference_engine_is_an_error_at_start_naming_what_is_missing(tiny_model):
    """Checked when the engines start, not when a missing method is first called at the end of a run."""
    import contextlib

    from areal_core import hookimpl
    from areal_core.engine import EngineConfig, EngineTarget, start_engines
    from areal_core.errors import PluginError
    from areal_core.plugins import get_plugin_manager, reset_plugin_manager

    class HalfAnEngine:
        async def generate(self, request):
            raise AssertionError("never called")

        async def close(self):
            pass

    @contextlib.asynccontextmanager
    async def half_engines(target, config, run_dir):
        yield HalfAnEngine()

    class Plugin:
        @hookimpl
        def register_engines(self, register):
            register("half", half_engines)

    async def run():
        async with start_engines(EngineConfig(backend="half"), EngineTarget(model=tiny_model)):
            raise AssertionError("the engines started")

    reset_plugin_manager()
    get_plugin_manager().register(Plugin(), "half-plugin")
    try:
        with pytest.raises(PluginError, match=r"engine backend 'half' \(plugin 'half-plugin'\) gave a HalfAnEngine "
                                              r"without health, model_info, pause, resume, server_stats, "
                                              r"update_weights: not an InferenceEngine"):
            asyncio.run(run())
    finally:
        reset_plugin_manager()
