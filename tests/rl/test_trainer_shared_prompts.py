"""Responses to one prompt are trained in one packed row behind a single copy of the prompt. The packed
forward must give every sequence the log-probs and entropies of its own row, and a training step the
same result as without packing."""
from __future__ import annotations

import pytest
import torch

from areal_core.engine.model import init_model, load_model
from areal_core.rl.trainer import (
    LocalTrainer,
    TrainerConfig,
    build_microbatch,
    microbatch_logprobs,
    sequence_logprobs,
)
from trainer_support import TEST_MODEL, load_weights, make_batch


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return init_model(tmp_path_factory.mktemp("model"), seed=9, **TEST_MODEL)


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_packed_rows_give_each_sequence_the_logprobs_and_entropy_of_its_own_row(model_dir, attention):
    # 5 prompts of different lengths, 3 responses each of lengths 1-29, and a prompt seen once
    batch = make_batch(model_dir, seed=4, groups=5, group_size=3) + make_batch(model_dir, seed=5, groups=1, group_size=1)
    model = load_model(model_dir).eval()
    model.config._attn_implementation = attention
    indices = list(range(len(batch)))
    plain = build_microbatch(batch, indices, torch.zeros(len(batch)), 0, torch.device("cpu"))
    packed = build_microbatch(batch, indices, torch.zeros(len(batch)), 0, torch.device("cpu"), shared_prompts=True)
    assert plain.shared is None and packed.shared is not None
    assert packed.shared.tokens.shape[0] == 6  # one row per distinct prompt
    assert packed.shared.tokens.numel() < plain.tokens.numel()
    with torch.no_grad():
        expected = sequence_logprobs(model, plain.tokens, plain.attention, 0.7)
        got = microbatch_logprobs(model, packed, 0.7)
    scored = plain.response.bool()
    assert int(scored.sum()) == sum(len(t.output_token_ids) for t in batch)
    for want, have in zip(expected, got):
        torch.testing.assert_close(have[scored], want[scored], rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("kl_coef", [0.0, 0.1])
def test_a_step_with_shared_prompts_equals_one_without(model_dir, kl_coef):
    batch = make_batch(model_dir, seed=6, groups=6, group_size=4)
    config = TrainerConfig(lr=1e-3, ppo_minibatches=2, micro_batch_tokens=256, kl_coef=kl_coef)
    shared, plain = LocalTrainer(model_dir, config, 10), LocalTrainer(model_dir, config, 10)
    assert shared.learner.share_prompts
    plain.learner.share_prompts = False
    for _ in range(2):
        fast, slow = shared.train_step(batch, 1.0), plain.train_step(batch, 1.0)
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
