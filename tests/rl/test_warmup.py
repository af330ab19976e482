"""The supervised warm-up's stop rule: it stops at the first step where the mean exact-match rate of the last
`stop_window` teacher-forced training batches reaches `stop_at_accuracy`, and runs every step otherwise."""
import json

import pytest

from areal_core.engine.model import init_model
from areal_core.rl.config import WarmupConfig
from areal_core.rl.warmup import supervised_warmup
from areal_core.tasks import Task, task_spec_from_dict


@pytest.fixture(scope="module")
def easy(tmp_path_factory):
    root = tmp_path_factory.mktemp("warmup")
    rows = [{"id": f"r{i}", "question": f"{i}?", "reference": "7"} for i in range(20)]  # one answer: learnt fast
    (root / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = task_spec_from_dict({"name": "easy", "dataset": {"path": "d.jsonl"}, "prompt": {"template": "{{ question }}"},
                                "reward": {"name": "arithmetic"}}, "easy")
    model = init_model(root / "model", seed=0, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                       num_key_value_heads=1, intermediate_size=64)
    return Task(spec, root), model


@pytest.mark.parametrize("window", [1, 3])
def test_the_warmup_stops_at_the_first_window_that_reaches_the_accuracy(easy, tmp_path, window):
    task, model = easy
    config = WarmupConfig(steps=200, batch_size=8, lr_warmup_steps=1, stop_at_accuracy=0.5, stop_window=window)
    done = json.loads((supervised_warmup(model, task, config, tmp_path / "out") / "warmup.json").read_text())
    curve = done["batch_accuracy"]
    means = [sum(curve[i + 1 - window:i + 1]) / window for i in range(window - 1, len(curve))]
    assert len(curve) == done["steps"] < 200
    assert means[-1] >= 0.5 and all(m < 0.5 for m in means[:-1])


def test_an_accuracy_never_reached_runs_every_step(easy, tmp_path):
    task, model = easy
    config = WarmupConfig(steps=5, batch_size=4, stop_at_accuracy=1.01, stop_window=3)
    done = json.loads((supervised_warmup(model, task, config, tmp_path / "out") / "warmup.json").read_text())
    assert done["steps"] == len(done["batch_accuracy"]) == 5
