"""The GPU profiles that ship with areal-core (areal_core/plan/profiles): built from public figures, every number with
its source, taken by `areal plan` by name; and what they say about a GPU checked against the figures they cite."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import areal_core.plan
from areal_core.plan.profile import load_profile

SHIPPED = sorted((Path(areal_core.plan.__file__).parent / "profiles").glob("*.yaml"))


def test_the_shipped_profiles_load_and_say_where_every_number_comes_from():
    assert [p.stem for p in SHIPPED] == ["h800-qwen1.5b", "h800-qwen7b"]
    for path in SHIPPED:
        profile = load_profile(path)
        data = yaml.safe_load(path.read_text())
        numbers = {f"{part}.{key}" for part in ("generation", "training", "rewards") for key in data[part]
                   if key not in ("gpus_per_server",)}
        assert numbers - set(profile.sources) == set(), f"{path.name}: numbers without a source"
        assert set(profile.sources) - numbers == set(), f"{path.name}: sources of numbers it does not hold"
        assert all(text.startswith(("[D]", "[A]")) and len(text) > 20 for text in profile.sources.values())


def decode_tokens_per_second(profile, running: int, context: int) -> float:
    g = profile.generation
    return running / g.step_seconds(running, running * context, 0)


def test_the_profiles_decode_as_fast_as_the_published_figures_they_were_built_from_say():
    small, large = (load_profile(path) for path in SHIPPED)
    # AReaL's generation of a 1.5B LRM on 8 H800s: 0.13M tokens/s, 16.3k a GPU (what sequence_s was calibrated on)
    assert 14_000 < decode_tokens_per_second(small, 256, 4000) < 18_000
    # AReaL's interruptible 7B rollout on 4 nodes: 130k tokens/s, 4.1k-5.4k a GPU
    assert 4_000 < decode_tokens_per_second(large, 128, 4000) < 6_500
    # a 7B step is slower than a 1.5B step at every load, and a full KV cache fits a few 27k-token responses at most
    for running, context in ((1, 100), (64, 8000), (256, 4000)):
        assert decode_tokens_per_second(large, running, context) < decode_tokens_per_second(small, running, context)
    assert large.generation.kv_tokens // 27_648 < small.generation.kv_tokens // 27_648 < 100


@pytest.mark.timeout(600)
def test_areal_plan_takes_a_shipped_profile_by_its_name(areal, tmp_path):
    result = areal("plan", "h800-qwen1.5b", "--gpus", "4", "--generation-gpus", "3", "--eta", "0,2",
                   "--output", str(tmp_path / "plan"), "task=arithmetic", "steps=2", "rollout.batch_size=4",
                   "rollout.group_size=2", "rollout.max_new_tokens=64")
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "plan" / "plan.json").read_text())
    assert report["profile"] == "h800-qwen1.5b" and report["sources"]["generation.step_s"].startswith("[D]")
    unknown = areal("plan", "h100-nonesuch", "--gpus", "4", "task=arithmetic")
    assert unknown.returncode == 2
    assert "no shipped profile of that name (shipped: h800-qwen1.5b, h800-qwen7b)" in unknown.stderr
