"""Responses to one prompt are trained in one packed row behind a single copy of the prompt. The packed
forward must give every sequence the log-probs and entropies of its own row, and a training step the
same result as without packing."""
from __future__ import annotations

import dataclasses
import random

import pytest
import torch

from areal_core.engine.model import init_model, load_model
from areal_core.rl.config import TrainerConfig
from areal_core.rl.trainer import (
    LocalTrainer,
    build_microbatch,
    microbatch_logprobs,
    sequence_logprobs,
    step_shape,
    train_step,
)
from areal_core.types import RewardResult, Trajectory
from trainer_support import TEST_MODEL, load_weights, make_batch


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return init_model(tmp_path_factory.mktemp("model"), seed=9, **TEST_MODEL)


def trajectories(spec: list[tuple[int, list[int]]], seed: int = 0) -> list[Trajectory]:
    """(prompt length, [response lengths]) per prompt -> trajectories with random tokens."""
    rng = random.Random(seed)
    batch = []
    for g, (prompt_length, lengths) in enumerate(spec):
        prompt = [rng.randrange(5, 100) for _ in range(prompt_length)]
        for k, length in enumerate(lengths):
            output = [rng.randrange(5, 100) for _ in range(length)]
            batch.append(Trajectory(trajectory_id=f"{g}.{k}", task="test", sample_id=str(g), group_id=str(g),
                                    prompt_token_ids=prompt, output_token_ids=output, output_logprobs=[0.0] * length,
                                    output_versions=[0] * length, response="", finish_reason="stop",
                                    reward=RewardResult(score=0.0)))
    return batch


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_packed_rows_give_each_sequence_the_logprobs_and_entropy_of_its_own_row(model_dir, attention):
    # short answers to longer prompts share rows (at most as wide as the attention area they replace:
    # 12 + 5 x 5 but not 12 + 6 x 5); long answers keep their own rows; a prompt seen once stays alone
    batch = trajectories([(12, [5] * 7), (10, [1, 3, 2, 4]), (4, [25, 30, 28]), (11, [6])])
    model = load_model(model_dir).eval()
    model.config._attn_implementation = attention
    indices = list(range(len(batch)))
    plain = build_microbatch(batch, indices, 0, torch.device("cpu"))
    packed = build_microbatch(batch, indices, 0, torch.device("cpu"), shared_prompts=True)
    assert plain.shared is None and packed.shared is not None
    assert packed.shared.rows[:, 0].tolist() == [0] * 5 + [1] * 2 + [2] * 4 + [3, 4, 5] + [6]
    assert packed.shared.tokens.shape[1] == 12 + 5 * 5
    with torch.no_grad():
        expected = sequence_logprobs(model, plain.tokens, plain.attention, 0.7)
        got = microbatch_logprobs(model, packed, 0.7)
    scored = plain.response.bool()
    assert int(scored.sum()) == sum(len(t.output_token_ids) for t in batch)
    for want, have in zip(expected, got):
        torch.testing.assert_close(have[scored], want[scored], rtol=1e-5, atol=2e-5)


def test_nothing_to_share_leaves_the_micro_batch_unpacked():
    batch = trajectories([(4, [25, 30]), (6, [3])])
    mb = build_microbatch(batch, [0, 1, 2], 0, torch.device("cpu"), shared_prompts=True)
    assert mb.shared is None


@pytest.mark.parametrize("kl_coef", [0.0, 0.1])
def test_a_step_with_shared_prompts_equals_one_without(model_dir, kl_coef):
    batch = make_batch(model_dir, seed=6, groups=6, group_size=4)
    # make_batch's answers are long for its prompts: shorten them so that prompts are shared
    batch = [dataclasses.replace(t, output_token_ids=t.output_token_ids[:3], output_logprobs=t.output_logprobs[:3],
                                 output_versions=t.output_versions[:3]) for t in batch]
    assert build_microbatch(batch, list(range(len(batch))), 0, torch.device("cpu"),
                            shared_prompts=True).shared is not None
    config = TrainerConfig(lr=1e-3, ppo_minibatches=2, micro_batch_tokens=256, kl_coef=kl_coef)
    shared, plain = LocalTrainer(model_dir, config, 10), LocalTrainer(model_dir, config, 10)
    assert shared.learner.share_prompts
    plain.learner.share_prompts = False
    for _ in range(2):
        version = shared.version
        fast, slow = train_step(shared, batch, 1.0), train_step(plain, batch, 1.0)
        # the positions the step computed, as the step loop logs them and `areal plan` counts them
        assert fast["positions"] == step_shape(batch, config, True, version)[0]
        assert slow["positions"] == step_shape(batch, config, False, version)[0] > fast["positions"]
        for key in ("loss", "kl_ref", "clip_fraction", "behav_weight_mean", "approx_kl", "entropy", "grad_norm"):
            assert fast[key] == pytest.approx(slow[key], rel=1e-4, abs=1e-6), key
    # Float sums in another order: AdamW turns the ~1e-9 differences of near-zero gradient entries into
    # visible ones for a few weights, so compare the whole update, and every weight loosely.
    start = load_weights(model_dir)
    for (name, a), (_, b) in zip(shared.model.named_parameters(), plain.model.named_parameters()):
        a, b = a.detach(), b.detach()
        torch.testing.assert_close(a, b, rtol=0, atol=1e-4, msg=name)
        moved = (b - start[name]).norm()
        assert moved > 1e-4 and (a - b).norm() < 1e-2 * moved, name


@pytest.mark.parametrize("microbatching", ["packed", "fixed"])
def test_step_shape_counts_the_positions_and_passes_the_step_builds(microbatching):
    """`areal plan` costs a step by step_shape: it must count what build_microbatch builds on every data-parallel
    rank (each micro-batch's rows times width, packed behind shared prompts or not, split and empty ones as
    rank_share deals them) and the passes each rank runs."""
    from areal_core.rl.trainer import plan_minibatches, rank_share, step_shape

    rng = random.Random(3)
    for case in range(30):
        spec = [(rng.randrange(2, 40), [rng.choice([1, 2, 4, 30, 120]) for _ in range(rng.randrange(1, 9))])
                for _ in range(rng.randrange(1, 12))]
        batch = trajectories(spec, seed=case)
        config = TrainerConfig(microbatching=microbatching, micro_batch_tokens=rng.choice([256, 1024, 4096]),
                               micro_batch_size=rng.randrange(1, 9), ppo_minibatches=rng.randrange(1, 5))
        plan = plan_minibatches(batch, config, case)
        lengths = [len(t.prompt_token_ids) + len(t.output_token_ids) for t in batch]
        for shared in (False, True):
            for ranks in (1, 2, 3):
                built, passes = 0, []
                for rank in range(ranks):   # what every rank builds, empty micro-batches and split ones included
                    share = rank_share(plan, lengths, rank, ranks)
                    passes.append(sum(len(minibatch) for minibatch in share))
                    for micro in (m for minibatch in share for m in minibatch):
                        mb = build_microbatch(batch, micro, 0, torch.device("cpu"), shared)
                        tokens = mb.shared.tokens if mb.shared is not None else mb.tokens
                        built += tokens.shape[0] * tokens.shape[1]
                assert len(set(passes)) == 1   # every rank runs as many passes
                assert step_shape(batch, config, shared, case, ranks) == (built, passes[0]), (case, shared, ranks)
