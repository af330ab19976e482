"""Checks shared by the engine tests: what a trainer recomputes, and what an interrupted run must show."""
import torch

from areal_core.engine.model import load_model

LOGPROB_TOLERANCE = 1e-4  # float32 on CPU; observed differences are ~1e-6


def reference_logprobs(model, prompt: list[int], output: list[int], temperature: float, top_p: float = 1.0,
                       top_k: int = -1) -> torch.Tensor:
    """What the trainer computes (`sequence_logprobs`, one full forward pass): log softmax(logits / T) of each output
    token, renormalised over the tokens top-p / top-k keep."""
    from areal_core.rl.trainer import sequence_logprobs

    tokens = torch.tensor([prompt + output])
    with torch.no_grad():
        logprobs = sequence_logprobs(model, tokens, torch.ones_like(tokens), temperature, top_p=top_p, top_k=top_k)[0]
    return logprobs[0, len(prompt) - 1:]


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
