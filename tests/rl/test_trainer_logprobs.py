"""The trainer's log-probs and entropy taken a chunk of positions at a time (trainer.picked_logprobs): the values
and gradients of one whole log_softmax, at every temperature, with fewer vocabulary-sized tensors alive."""
from __future__ import annotations

import pytest
import torch

from areal_core.rl import trainer as trainer_module
from areal_core.rl.trainer import _logprobs_and_entropy, picked_logprobs


@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
def test_chunked_logprobs_and_entropy_equal_a_whole_log_softmax_with_their_gradients(temperature, monkeypatch):
    monkeypatch.setattr(trainer_module, "SOFTMAX_CHUNK", 64)   # several chunks, the last one short
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 150, 40, generator=generator, requires_grad=True)
    tokens = torch.randint(0, 40, (3, 150), generator=generator)
    rows, cols = torch.arange(3)[:, None].expand(3, 150), torch.arange(150)[None, :].expand(3, 150)
    logprobs, entropy = picked_logprobs(logits, temperature, True, (rows, cols, tokens))
    whole, whole_entropy = _logprobs_and_entropy(logits, temperature, True)
    expected = whole.gather(-1, tokens[..., None])[..., 0]
    torch.testing.assert_close(logprobs, expected, rtol=0, atol=1e-5)
    torch.testing.assert_close(entropy, whole_entropy, rtol=0, atol=1e-5)
    weights = torch.randn(3, 150, generator=generator)
    got = torch.autograd.grad((weights * logprobs).sum() + 0.3 * entropy.sum(), logits)[0]
    want = torch.autograd.grad((weights * expected).sum() + 0.3 * whole_entropy.sum(), logits)[0]
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    # without entropy_grad the entropy carries no gradient, as before
    assert not picked_logprobs(logits, temperature, False, (rows, cols, tokens))[1].requires_grad


def test_a_bfloat16_models_gradient_is_the_whole_float32_softmaxs_rounded_once():
    """bfloat16 logits: the gradient of a confident token (p ~ 0.999) is that of log_softmax(logits.float()), not
    two bfloat16 gradients added (which rounds 1 - p to 0)."""
    logits = torch.full((1, 4, 300), -4.0)
    logits[0, :, 7] = 6.0   # p(7) ~ 0.998
    logits = logits.to(torch.bfloat16).requires_grad_(True)
    tokens = torch.full((1, 4), 7)
    rows, cols = torch.zeros(1, 4, dtype=torch.long), torch.arange(4)[None, :]
    logprobs, _ = picked_logprobs(logits, 1.0, False, (rows, cols, tokens))
    got = torch.autograd.grad(logprobs.sum(), logits)[0]
    whole, _ = _logprobs_and_entropy(logits, 1.0, False)
    want = torch.autograd.grad(whole.gather(-1, tokens[..., None]).sum(), logits)[0]
    assert torch.equal(got, want)
    assert (got[0, :, 7] > 0).all()
