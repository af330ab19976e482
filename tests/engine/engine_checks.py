"""Checks shared by the engine tests: what a trainer recomputes, and what an interrupted run must show."""
import torch

from areal_core.engine.model import load_model

LOGPROB_TOLERANCE = 1e-4  # float32 on CPU; observed differences are ~1e-6


def reference_logprobs(model, prompt: list[int], output: list[int], temperature: float) -> torch.Tensor:
    """What a trainer computes: log softmax(logits / T) of each output token from one full forward pass."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + output])).logits[0].float()
    t = temperature if temperature > 0 else 1.0
    logprobs = torch.log_softmax(logits / t, dim=-1)[len(prompt) - 1:-1]
    return logprobs.gather(1, torch.tensor(output)[:, None])[:, 0]


def assert_continued_with_new_weights(prompts, outputs, old_path, new_path, old_version, new_version, n,
                                      min_cut=1, tolerance=LOGPROB_TOLERANCE):
    """Every request was interrupted once and completed: tokens before the update carry the old version and
    the old weights' log-probs, tokens after it the new version and the new weights' log-probs."""
    old, new = load_model(old_path), load_model(new_path)
    for prompt, out in zip(prompts, outputs):
        assert len(out.output_ids) == n and out.finish_reason == "length"
        assert out.num_interruptions == 1
        cut = out.output_versions.index(new_version)
        assert min_cut <= cut < n
        assert out.output_versions == [old_version] * cut + [new_version] * (n - cut)
        lp = torch.tensor(out.output_logprobs)
        ref_old = reference_logprobs(old, prompt, out.output_ids, 1.0)
        ref_new = reference_logprobs(new, prompt, out.output_ids, 1.0)
        assert torch.allclose(lp[:cut], ref_old[:cut], atol=tolerance)
        assert torch.allclose(lp[cut:], ref_new[cut:], atol=tolerance)
        assert not torch.allclose(lp[cut:], ref_old[cut:], atol=tolerance)
