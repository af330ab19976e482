"""Log-probs from the hidden states, the output head a chunk at a time (rl/output_head.py): the values and gradients of
the model's own logits through one whole log_softmax, only where that is what the model computes, and a micro-batch
that never holds its [tokens, vocabulary] logits."""
from __future__ import annotations

import pytest
import torch

from areal_core.engine.model import init_model, load_model
from areal_core.rl import output_head
from areal_core.rl.config import LoraSettings, TrainerConfig
from areal_core.rl.output_head import head_logprobs, use_hidden_state_head, uses_hidden_state_head
from areal_core.rl.trainer import PPOLearner, _logprobs_and_entropy, sequence_logprobs, trainable_model
from areal_core.types import RewardResult, Trajectory
from support import peak_rss_growth


def whole_logprobs(hidden, head, temperature, index):
    """The reference: the full logits, one log_softmax."""
    logprobs, entropy = _logprobs_and_entropy(head(hidden), temperature, True)
    return logprobs[index], entropy


@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
@pytest.mark.parametrize("bias", [False, True])
def test_values_and_gradients_equal_one_log_softmax_over_the_whole_logits(temperature, bias, monkeypatch):
    # chunks of 64 positions on a CPU, the last one short
    monkeypatch.setattr(output_head, "HEAD_CHUNK_ELEMENTS", output_head.CPU_HEAD_CHUNK_SHARE * 64 * 40)
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(3, 150, 16, generator=generator, requires_grad=True)
    head = torch.nn.Linear(16, 40, bias=bias)
    # every position once, then picks as responses behind a shared prompt make them: several on one position,
    # out of order, some positions never picked
    everywhere = (torch.arange(3)[:, None].expand(3, 150), torch.arange(150)[None, :].expand(3, 150),
                  torch.randint(0, 40, (3, 150), generator=generator))
    shared = (torch.tensor([[2], [0], [2]]), torch.tensor([[5, 6, 70], [1, 2, 3], [5, 149, 100]]),
              torch.randint(0, 40, (3, 3), generator=generator))
    params = [hidden, head.weight] + ([head.bias] if bias else [])
    for index in (everywhere, shared):
        logprobs, entropy = head_logprobs(hidden, head, temperature, True, index)
        expected, expected_entropy = whole_logprobs(hidden, head, temperature, index)
        torch.testing.assert_close(logprobs, expected, rtol=0, atol=1e-5)
        torch.testing.assert_close(entropy, expected_entropy, rtol=0, atol=1e-5)
        weights = torch.randn(logprobs.shape, generator=generator)
        bonus = torch.randn(entropy.shape, generator=generator)   # per position: a misplaced chunk would show
        got = torch.autograd.grad((weights * logprobs).sum() + (bonus * entropy).sum(), params, retain_graph=True)
        want = torch.autograd.grad((weights * expected).sum() + (bonus * expected_entropy).sum(), params,
                                   retain_graph=True)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=0, atol=2e-5)
        # the entropy alone (no log-prob in the loss: its gradient is None in the backward pass)
        got = torch.autograd.grad((bonus * entropy).sum(), params)
        want = torch.autograd.grad((bonus * expected_entropy).sum(), params)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=0, atol=2e-5)
        # without entropy_grad: no gradient through the entropy, and the log-probs' alone is the same
        logprobs, entropy = head_logprobs(hidden, head, temperature, False, index)
        assert not entropy.requires_grad
        got = torch.autograd.grad((weights * logprobs).sum(), params)
        want = torch.autograd.grad((weights * whole_logprobs(hidden, head, temperature, index)[0]).sum(), params)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=0, atol=2e-5)


def test_a_cpu_takes_smaller_chunks_of_logits_than_an_accelerator():
    """Qwen's vocabulary: 55 positions a chunk on a CPU (32 MB of logits), 110 on an accelerator (64 MB)."""
    on_cpu = output_head._chunks(300, 151_936, torch.device("cpu"))
    on_gpu = output_head._chunks(300, 151_936, torch.device("cuda", 0))   # a device name: no GPU is needed
    assert [end - start for start, end in on_cpu] == [55] * 5 + [25]
    assert [end - start for start, end in on_gpu] == [110, 110, 80]


def test_a_bfloat16_heads_gradient_is_formed_in_float32_and_rounded_once():
    """A confident token (p ~ 0.998): its 1 - p must survive in a bfloat16 model (the gradient of the float32
    softmax of the same bfloat16 numbers, rounded), not vanish as 1 and -p rounded apart would make it."""
    torch.manual_seed(0)
    head = torch.nn.Linear(32, 300, bias=False).to(torch.bfloat16)
    hidden = torch.randn(1, 4, 32).to(torch.bfloat16)
    with torch.no_grad():
        head.weight[7] = hidden[0, 0] * 0.4   # token 7's logit ~ 0.4 |h|^2: far above the rest
    hidden.requires_grad_(True)
    index = (torch.zeros(1, 4, dtype=torch.long), torch.arange(4)[None, :], torch.full((1, 4), 7))
    logprobs, _ = head_logprobs(hidden, head, 1.0, False, index)
    assert logprobs[0, 0].exp().item() > 0.99
    got = torch.autograd.grad(logprobs.sum(), [hidden, head.weight])
    exact_hidden = hidden.detach().float().requires_grad_(True)
    exact_weight = head.weight.detach().float().requires_grad_(True)
    exact = torch.log_softmax(exact_hidden @ exact_weight.t(), -1)[index]
    want = torch.autograd.grad(exact.sum(), [exact_hidden, exact_weight])
    for g, w in zip(got, want):
        assert g.dtype == torch.bfloat16
        torch.testing.assert_close(g.float(), w, rtol=2e-2, atol=1e-3)
    assert got[0][0, 0].abs().sum() > 0


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return init_model(tmp_path_factory.mktemp("model"), seed=1)


def test_the_trainer_takes_hidden_states_only_where_they_give_the_models_own_logits(model_dir):
    model = load_model(model_dir)
    assert use_hidden_state_head(model) and uses_hidden_state_head(model)
    lora = LoraSettings(rank=4, alpha=8, target_modules=["q_proj", "v_proj"])
    assert uses_hidden_state_head(trainable_model(load_model(model_dir), TrainerConfig(lora=lora)))
    # a LoRA-adapted head is no plain linear map: the full logits
    lora_head = LoraSettings(rank=4, alpha=8, target_modules=["q_proj", "lm_head"])
    assert not uses_hidden_state_head(trainable_model(load_model(model_dir), TrainerConfig(lora=lora_head)))

    class Softcapped(type(model)):   # a model that does more to its logits than the head (as Gemma 2 does)
        def forward(self, *args, **kwargs):
            out = super().forward(*args, **kwargs)
            out.logits = 30.0 * torch.tanh(out.logits / 30.0)
            return out

    capped = load_model(model_dir)
    capped.__class__ = Softcapped
    assert not use_hidden_state_head(capped)
    # refused by its config too (soft-capping of small random logits can pass a probe's tolerance)
    named = load_model(model_dir)
    named.config.final_logit_softcapping = 30.0
    assert not use_hidden_state_head(named)
    # where it is used, the trainer's log-probs are those of the full logits
    tokens = torch.randint(5, 60, (3, 20), generator=torch.Generator().manual_seed(0))
    attention = torch.ones_like(tokens)
    attention[1, 15:] = 0
    with torch.no_grad():
        from_hidden = sequence_logprobs(model, tokens, attention, 0.8)
        object.__setattr__(model, output_head._FLAG, False)
        from_logits = sequence_logprobs(model, tokens, attention, 0.8)
    for got, want in zip(from_hidden, from_logits):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


def large_vocabulary_model(vocab: int) -> torch.nn.Module:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True)
    return Qwen2ForCausalLM(config)


def test_an_update_at_a_large_vocabulary_holds_no_whole_logits():
    """A 2048-token micro-batch at 131,072 tokens: its float32 logits are 1.07 GB, and with their gradient the step
    held over 2 GB more than the weights. From the hidden states it holds a few 64 MB chunks."""
    vocab = 131072
    model = trainable_model(large_vocabulary_model(vocab), TrainerConfig())
    assert uses_hidden_state_head(model)
    generator = torch.Generator().manual_seed(0)
    batch = []
    for k in range(8):
        prompt = torch.randint(0, vocab, (16,), generator=generator).tolist()
        output = torch.randint(0, vocab, (240,), generator=generator).tolist()
        batch.append(Trajectory(trajectory_id=str(k), task="t", sample_id=str(k // 4), group_id=str(k // 4),
                                prompt_token_ids=prompt, output_token_ids=output, output_logprobs=[-11.0] * 240,
                                output_versions=[0] * 240, response="", finish_reason="stop",
                                reward=RewardResult(score=float(k % 2))))
    def update_peak(learner: PPOLearner) -> int:
        prepared = learner.prepare(batch, 1.0)
        learner.recompute_proximal(prepared)
        with peak_rss_growth() as growth:
            learner.ppo_update(prepared, torch.tensor([1.0, -1.0] * 4))
        return growth.bytes

    settings = TrainerConfig(ppo_minibatches=1, micro_batch_tokens=2048, share_prompts=False,
                             measure_stale_mismatch=False, entropy_coef=0.01)
    chunked = update_peak(PPOLearner(model, None, settings, total_steps=2, version=0, pad_id=0))
    object.__setattr__(model, output_head._FLAG, False)
    whole = update_peak(PPOLearner(model, None, settings, total_steps=2, version=0, pad_id=0))
    logits_bytes = 2048 * vocab * 4
    assert whole > 2 * logits_bytes, (whole, logits_bytes)   # what it was: the logits and their gradient, at least
    assert chunked < logits_bytes / 2, (chunked, logits_bytes)
