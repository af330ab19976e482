"""Log-probs and entropy straight from the final hidden states, the output head applied a chunk of positions at a
time, so no [tokens, vocabulary] logits tensor is ever whole.

At Qwen's 151,936 tokens the logits of a 4096-token micro-batch are 2.5 GB in float32, and autograd keeps them and
their gradient; here a step holds one chunk's logits at a time, in the forward and the backward pass, whose
gradient (softmax minus the picked token, and the entropy's) is formed in float32 and rounded once, as one
log_softmax over the whole logits would (the same fused head and loss as Liger's and torchtune's).

Used where it gives the model's own logits: `use_hidden_state_head` checks that once per model (a plain linear head
applied to the decoder's last hidden state, as in Qwen, Llama, Mistral); the others keep the full logits.
"""
from __future__ import annotations

from typing import Any

import torch

# Logits per chunk, in elements: each chunk's float32 logits (and in the backward pass their probabilities and
# gradient) are this size, 64 MB; 110 positions at a 151,936-token vocabulary. On an accelerator every chunk reads the
# whole [V, H] table, which bounds its time there. A CPU's matmul is bound by its arithmetic even at a few dozen rows,
# so there chunks are CPU_HEAD_CHUNK_SHARE times smaller: the head's backward, the peak of an FSDP rank's step at 0.5B,
# holds less for the same time (bench/RESULTS.md, "Real-size rehearsal").
HEAD_CHUNK_ELEMENTS = 1 << 24
CPU_HEAD_CHUNK_SHARE = 2

_FLAG = "_areal_hidden_state_head"


def _unwrapped(model: torch.nn.Module) -> torch.nn.Module:
    """The Hugging Face model under a peft wrapper (LoRA injects its layers in place: the same modules)."""
    base = getattr(model, "get_base_model", None)
    return base() if callable(base) else model


# Config settings of models that do more to their logits than the head (soft-capping: Gemma 2; scaling: Cohere,
# Granite): the probe could miss it on small random-init logits, so they are refused by name.
LOGIT_TRANSFORMS = {"final_logit_softcapping": None, "logit_softcapping": None, "logit_scale": 1.0,
                    "logits_scaling": 1.0}


def _decoder_and_head(model: torch.nn.Module) -> tuple[torch.nn.Module, torch.nn.Linear] | None:
    inner = _unwrapped(model)
    config = getattr(inner, "config", None)
    if any(getattr(config, key, neutral) not in (neutral, None) for key, neutral in LOGIT_TRANSFORMS.items()):
        return None
    try:
        decoder, head = inner.get_decoder(), inner.get_output_embeddings()
    except (AttributeError, ValueError, NotImplementedError):
        return None
    if type(head) is not torch.nn.Linear or decoder is None or decoder is inner:
        return None   # a LoRA-wrapped or otherwise custom head: its own forward is not F.linear
    return decoder, head


def hidden_states(model: torch.nn.Module, **inputs: Any) -> tuple[torch.Tensor, torch.nn.Linear]:
    """The decoder's last hidden states [..., H] for `inputs`, and the output head: one forward pass of the model
    asked for no logits (logits_to_keep = no position), the states taken from the decoder's output."""
    found = _decoder_and_head(model)
    if found is None:
        raise ValueError(f"{type(model).__name__} has no plain linear output head after its decoder")
    decoder, head = found
    captured: list[torch.Tensor] = []

    def keep(module: torch.nn.Module, args: Any, output: Any) -> None:
        captured.append(output.last_hidden_state if hasattr(output, "last_hidden_state") else output[0])

    ids = inputs["input_ids"]
    handle = decoder.register_forward_hook(keep)
    try:
        model(**inputs, logits_to_keep=torch.empty(0, dtype=torch.long, device=ids.device))
    finally:
        handle.remove()
    if len(captured) != 1:
        raise RuntimeError(f"the decoder of {type(model).__name__} ran {len(captured)} times in one forward pass")
    from torch.distributed.tensor import DTensor

    if isinstance(head.weight, DTensor):   # FSDP2 keeps the root (embeddings, head) unsharded after its forward
        raise RuntimeError("the output head's weight is sharded after the forward pass (the FSDP root was set to "
                           "reshard after forward?): the log-probs need the gathered weight")
    if torch.is_grad_enabled() and captured[0].requires_grad:
        _release_gathered_weights_after_head(model, captured[0], head)
    return captured[0], head


def _gathered_root_weights(model: torch.nn.Module, head: torch.nn.Linear) -> list[Any]:
    """FSDP2's records of the root's gathered (unsharded) weights that no backward pass reads after the head's: the
    head's own and the input embedding's (a lookup's gradient needs the token ids, not the table). One record when
    they are tied. [] for a model FSDP2 does not shard."""
    get_state = getattr(model, "_get_fsdp_state", None)
    group = getattr(get_state(), "_fsdp_param_group", None) if callable(get_state) else None
    if group is None:
        return []
    weights = {id(head.weight)}
    embedding = _unwrapped(model).get_input_embeddings()
    if type(embedding) is torch.nn.Embedding:   # a subclass may do more to its table (scale, LoRA) in backward
        weights.add(id(embedding.weight))
    return [record for record in group.fsdp_params if id(getattr(record, "_unsharded_param", None)) in weights]


def _release_gathered_weights_after_head(model: torch.nn.Module, hidden: torch.Tensor, head: torch.nn.Linear) -> None:
    """Free the gathered head (and embedding) weights once the backward pass is past the head.

    FSDP2 keeps the root's parameters gathered until its backward pass ends, and the root's are the embedding and
    the head, used at both ends of the model. Tied, as in Qwen, that is a whole [V, H] table (545 MB at 0.5B)
    beside its whole gradient through the entire backward pass, the rank's peak. The head's backward is the last
    to read it (the embedding's backward reads only the ids), so once the gradient of the hidden states exists
    its storage goes, as FSDP2's own reshard would free it (the gradient stays for the reduce-scatter; the next
    forward gathers it again). Several forward passes before one backward: freed after the last head's. This
    reaches into FSDP2's records (torch 2.13); tests/rl/test_fsdp_memory.py checks that the storage is gone."""
    records = _gathered_root_weights(model, head)
    if not records:
        return
    pending = getattr(model, "_areal_heads_pending", 0) + 1
    object.__setattr__(model, "_areal_heads_pending", pending)

    def release(grad: torch.Tensor) -> None:
        left = getattr(model, "_areal_heads_pending", 1) - 1
        object.__setattr__(model, "_areal_heads_pending", left)
        if left == 0:
            for record in records:
                record.free_unsharded_param()

    hidden.register_hook(release)


def use_hidden_state_head(model: torch.nn.Module) -> bool:
    """Mark `model` for log-probs from its hidden states when that is exactly its own output (checked on a short
    probe: the logits of the head applied to the captured states against the model's logits); returns whether it
    was. Run before FSDP shards the model (the probe is a forward pass FSDP would not expect)."""
    found = _decoder_and_head(model)
    usable = False
    if found is not None:
        param = next(model.parameters())
        vocab = int(getattr(getattr(_unwrapped(model), "config", None), "vocab_size", 2))
        probe = (torch.arange(1, 13, device=param.device) % max(vocab, 2))[None]
        training = model.training
        model.eval()
        try:
            with torch.no_grad():
                logits = model(input_ids=probe).logits.float()
                hidden, head = hidden_states(model, input_ids=probe)
                usable = torch.allclose(head(hidden).float(), logits, rtol=1e-4, atol=1e-5)
        except (TypeError, ValueError, RuntimeError, AttributeError):  # no logits_to_keep, another output type, ...
            usable = False
        finally:
            model.train(training)
    object.__setattr__(model, _FLAG, usable)   # a plain attribute, not a submodule or a buffer
    return usable


def uses_hidden_state_head(model: torch.nn.Module) -> bool:
    return bool(getattr(model, _FLAG, False))


def _chunks(positions: int, vocab: int, device: torch.device) -> list[tuple[int, int]]:
    elements = HEAD_CHUNK_ELEMENTS // (CPU_HEAD_CHUNK_SHARE if device.type == "cpu" else 1)
    size = max(1, elements // max(vocab, 1))
    return [(start, min(start + size, positions)) for start in range(0, positions, size)]


def _chunk_logits(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, scale: float) -> torch.Tensor:
    return torch.nn.functional.linear(hidden, weight, bias).float().div_(scale)


class _HeadLogprobs(torch.autograd.Function):
    """(hidden [P, H], weight [V, H], bias [V] | None, positions [N], tokens [N], scale) -> log p(tokens[i] at
    positions[i]) [N] and the entropy at every position [P], under softmax(head(hidden) / scale). Positions must be
    sorted (several picks may share one: responses behind one shared prompt). The backward pass recomputes each
    chunk's logits."""

    @staticmethod
    def forward(ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                positions: torch.Tensor, tokens: torch.Tensor, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
        ctx.set_materialize_grads(False)   # an entropy nobody differentiates stays None: no work for it
        chunks = _chunks(hidden.shape[0], weight.shape[0], hidden.device)
        starts = torch.tensor([start for start, _ in chunks] + [hidden.shape[0]], device=positions.device)
        bounds = torch.searchsorted(positions, starts).tolist()   # chunk c's picks: bounds[c]:bounds[c + 1]
        normaliser = hidden.new_empty(hidden.shape[0], dtype=torch.float32)
        entropy = torch.empty_like(normaliser)
        picked = hidden.new_empty(positions.shape[0], dtype=torch.float32)
        for c, (start, end) in enumerate(chunks):
            logp = _chunk_logits(hidden[start:end], weight, bias, scale)
            normaliser[start:end] = lse = torch.logsumexp(logp, dim=-1)
            logp.sub_(lse[:, None])
            first, last = bounds[c], bounds[c + 1]
            picked[first:last] = logp[positions[first:last] - start, tokens[first:last]]
            entropy[start:end] = -logp.exp().mul_(logp).sum(-1)
        ctx.save_for_backward(hidden, weight, bias, positions, tokens, normaliser, entropy)
        ctx.scale, ctx.chunks, ctx.bounds = scale, chunks, bounds
        return picked, entropy

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_picked: torch.Tensor | None, grad_entropy: torch.Tensor | None) -> tuple[Any, ...]:
        hidden, weight, bias, positions, tokens, normaliser, entropy = ctx.saved_tensors
        need_hidden, need_weight, need_bias = ctx.needs_input_grad[:3]
        grad_hidden = torch.empty_like(hidden) if need_hidden else None   # every chunk's rows are written
        # in the weight's dtype (each chunk's product is accumulated in float32 by the matmul and added once): a
        # float32 [V, H] buffer beside a bfloat16 model's own gradient would be 3x its size (Liger does the same)
        grad_weight = torch.zeros_like(weight) if need_weight else None
        grad_bias = torch.zeros(weight.shape[0], dtype=torch.float32, device=weight.device) if need_bias else None
        for c, (start, end) in enumerate(ctx.chunks):
            logp = _chunk_logits(hidden[start:end], weight, bias, ctx.scale).sub_(normaliser[start:end, None])
            p = logp.exp()
            first, last = ctx.bounds[c], ctx.bounds[c + 1]
            rows = positions[first:last] - start
            picks = grad_picked[first:last].float() if grad_picked is not None else None
            # d log p_t / dz = onehot(t) - p and d entropy / dz = -p (log p + entropy), z = logits / scale; in float32
            # and summed before any rounding (a confident token's 1 - p survives in a bfloat16 model)
            per_position = torch.zeros(end - start, device=p.device)
            if picks is not None:
                per_position.index_add_(0, rows, picks)
            if grad_entropy is not None:
                grad = logp.add_(entropy[start:end, None]).mul_(grad_entropy[start:end, None].float())
                grad = grad.add_(per_position[:, None]).mul_(p).neg_()
            else:
                grad = p.mul_(per_position[:, None]).neg_()
            del p, logp
            if picks is not None:
                grad.index_put_((rows, tokens[first:last]), picks, accumulate=True)
            grad.div_(ctx.scale)
            if grad_hidden is not None:
                grad_hidden[start:end] = grad.to(weight.dtype) @ weight
            if grad_weight is not None:
                grad_weight.addmm_(grad.t().to(weight.dtype), hidden[start:end].to(weight.dtype))
            if grad_bias is not None:
                grad_bias += grad.sum(0)
        return (grad_hidden, grad_weight, grad_bias.to(bias.dtype) if grad_bias is not None else None,
                None, None, None)


def head_logprobs(hidden: torch.Tensor, head: torch.nn.Linear, temperature: float, entropy_grad: bool,
                  index: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """log softmax(head(hidden) / T) at `index` (the leading coordinates of `hidden` [..., H], then the token ids;
    the shape of the result is theirs), and the entropy at every position [...] (a gradient only with
    `entropy_grad`): the values of trainer.picked_logprobs on the model's logits, to float rounding."""
    *where, token = index
    leading = hidden.shape[:-1]
    strides = [1]
    for size in reversed(leading[1:]):
        strides.insert(0, strides[0] * size)
    position = sum(coordinate * stride for coordinate, stride in zip(where, strides))
    position, token = torch.broadcast_tensors(position, token)
    order = position.reshape(-1).argsort(stable=True)
    scale = temperature if temperature > 0 else 1.0
    flat = hidden.reshape(-1, hidden.shape[-1])
    picked, entropy = _HeadLogprobs.apply(flat, head.weight, head.bias, position.reshape(-1)[order],
                                          token.reshape(-1)[order], scale)
    logprobs = picked[order.argsort()].reshape(position.shape)   # back in the order of `index`
    entropy = entropy.reshape(leading)
    return logprobs, entropy if entropy_grad else entropy.detach()
