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


async def stream_weights(engine, sender, version: int, cap_bytes: int, group_name: str, port: int,
                         backend: str = "gloo") -> list:
    """What rl/weight_updates.py does, from a `WeightSender` in this process: the engine's ranks and the sender
    meet in a new group, every staged bucket is broadcast while the engine receives it, the last one carries
    `version`; the group is left afterwards. Returns the buckets."""
    import asyncio

    ranks = await engine.weight_group_ranks()
    await asyncio.gather(
        engine.init_weight_group("127.0.0.1", port, 1, 1 + ranks, group_name, backend, 60.0),
        asyncio.to_thread(sender.join, f"tcp://127.0.0.1:{port}", 1 + ranks, group_name, backend, 60.0))
    try:
        buckets = sender.stage(cap_bytes)
        await engine.begin_weight_update()
        for index, bucket in enumerate(buckets):
            last = index == len(buckets) - 1
            await asyncio.gather(
                engine.update_weights_from_distributed(bucket, version if last else None, group_name, flush_cache=last),
                asyncio.to_thread(sender.send, index))
        await engine.end_weight_update()
    finally:
        await engine.destroy_weight_group(group_name)
        sender.leave()
    return buckets
