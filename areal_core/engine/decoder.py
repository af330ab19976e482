"""Batched decoding over a slotted KV cache for Qwen2 / Llama-family models loaded with `transformers`.

The engine keeps one cache row ("slot") per running request. A forward call takes a batch of slots,
each with its own number of cached tokens (`start`) and new tokens (`length`); it writes the new keys
and values into the slots and attends causally over everything cached. So a request can join the
running batch at any step (continuous batching) and a request's cache can be dropped and rebuilt from
its tokens (interruptible generation).

The layers' own modules (projections, norms, rotary embedding, MLP) are called, so the arithmetic is the
model's; only the cache and the attention mask are ours. `tests/engine` checks the logits against the
model's own forward.
"""
from __future__ import annotations

import importlib

import torch
import torch.nn.functional as F

from areal_core.engine.model import ModelError

INITIAL_SLOTS, INITIAL_LENGTH = 8, 256   # the cache's first size; it doubles as requests need
SUPPORTED = {"qwen2": "transformers.models.qwen2.modeling_qwen2", "llama": "transformers.models.llama.modeling_llama"}


class SlottedDecoder:
    """Runs a HF causal LM with a [layers, slots, kv_heads, max_len, head_dim] KV cache."""

    def __init__(self, model: torch.nn.Module, slots: int, max_len: int) -> None:
        config = model.config
        if config.model_type not in SUPPORTED:
            raise ModelError(f"the local engine supports {sorted(SUPPORTED)} models, not {config.model_type!r}; "
                             "serve other architectures with SGLang")
        if getattr(config, "use_sliding_window", False):
            raise ModelError("sliding-window attention is not supported by the local engine")
        self.model = model
        self.apply_rotary = importlib.import_module(SUPPORTED[config.model_type]).apply_rotary_pos_emb
        inner = model.model
        self.layers = list(inner.layers)
        attn = self.layers[0].self_attn
        self.head_dim = attn.head_dim
        self.scaling = attn.scaling
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.slots = slots
        self.max_len = max_len
        param = next(model.parameters())
        # Allocated for what runs, grown on demand up to [slots, max_len]: a real model's context (Qwen2.5's
        # 32768 positions x 256 slots) would need tens of GiB before the first request.
        shape = (len(self.layers), min(slots, INITIAL_SLOTS), self.kv_heads, min(max_len, INITIAL_LENGTH), self.head_dim)
        self.k_cache = torch.zeros(shape, dtype=param.dtype, device=param.device)
        self.v_cache = torch.zeros(shape, dtype=param.dtype, device=param.device)

    def reserve(self, slots: int, length: int) -> None:
        """Grow the cache (each dimension to the next power of two, at most slots x max_len) to hold slots
        0 .. slots - 1 with `length` positions each; what it holds is kept."""
        have_slots, have_length = self.k_cache.shape[1], self.k_cache.shape[3]
        if slots <= have_slots and length <= have_length:
            return
        grown_slots = min(self.slots, max(have_slots, 1 << (slots - 1).bit_length()))
        grown_length = min(self.max_len, max(have_length, 1 << (length - 1).bit_length()))
        for name in ("k_cache", "v_cache"):
            old = getattr(self, name)
            grown = old.new_zeros((old.shape[0], grown_slots, old.shape[2], grown_length, old.shape[4]))
            grown[:, :have_slots, :, :have_length] = old
            setattr(self, name, grown)

    @torch.inference_mode()
    def copy_slots(self, sources: list[int], targets: list[int], length: int) -> None:
        """Copy the first `length` cached positions of each source slot into its target slot."""
        self.reserve(max(sources + targets) + 1, length)
        src = torch.tensor(sources, device=self.k_cache.device)
        dst = torch.tensor(targets, device=self.k_cache.device)
        self.k_cache[:, dst, :, :length] = self.k_cache[:, src, :, :length]
        self.v_cache[:, dst, :, :length] = self.v_cache[:, src, :, :length]

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, slots: torch.Tensor, start: torch.Tensor,
                lengths: torch.Tensor) -> torch.Tensor:
        """tokens [B, T] (right-padded), slots/start/lengths [B] -> logits [B, vocab] at each row's last
        new token. Row b's tokens occupy positions start[b] .. start[b] + lengths[b] - 1."""
        inner = self.model.model
        B, T = tokens.shape
        device = tokens.device
        offsets = torch.arange(T, device=device)
        positions = start[:, None] + offsets[None, :]                       # [B, T]
        valid = offsets[None, :] < lengths[:, None]                          # [B, T]
        if int(lengths.min()) < 1:
            raise ModelError("every row of a forward needs at least one new token")
        if int((start + lengths).max()) > self.max_len:
            raise ModelError(f"sequence longer than the engine's max length {self.max_len}")
        key_len = int((start + lengths).max())
        self.reserve(int(slots.max()) + 1, key_len)
        # Query t of row b sees cached positions 0 .. start[b] + t.
        key_pos = torch.arange(key_len, device=device)
        mask = key_pos[None, None, :] <= positions[:, :, None]              # [B, T, K]
        mask = mask[:, None]                                                 # [B, 1, T, K]
        flat_slots = slots[:, None].expand(B, T)[valid]
        flat_pos = positions[valid]
        N = flat_pos.numel()

        # Every layer but attention runs on the new tokens alone, packed [1, N] (a decode row is not padded to
        # a prompt's length); attention runs per row over its slot, padded [B, T].
        hidden = inner.embed_tokens(tokens[valid])[None]                     # [1, N, H]
        cos, sin = inner.rotary_emb(hidden, flat_pos[None])
        padded = torch.zeros(B, T, self.heads, self.head_dim, dtype=hidden.dtype, device=device)
        for i, layer in enumerate(self.layers):
            attn = layer.self_attn
            residual = hidden
            x = layer.input_layernorm(hidden)
            q = attn.q_proj(x).view(1, N, self.heads, self.head_dim).transpose(1, 2)
            k = attn.k_proj(x).view(1, N, self.kv_heads, self.head_dim).transpose(1, 2)
            v = attn.v_proj(x).view(1, N, self.kv_heads, self.head_dim)
            q, k = self.apply_rotary(q, k, cos, sin)
            self.k_cache[i][flat_slots, :, flat_pos] = k[0].transpose(0, 1)
            self.v_cache[i][flat_slots, :, flat_pos] = v[0]
            keys = self.k_cache[i][slots, :, :key_len]
            values = self.v_cache[i][slots, :, :key_len]
            padded[valid] = q[0].transpose(0, 1)
            out = F.scaled_dot_product_attention(padded.transpose(1, 2), keys, values, attn_mask=mask,
                                                 scale=self.scaling, enable_gqa=self.heads != self.kv_heads)
            hidden = residual + attn.o_proj(out.transpose(1, 2)[valid].reshape(1, N, -1))
            hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
        last = torch.cumsum(lengths, 0) - 1                                  # each row's last new token, packed
        hidden = inner.norm(hidden[0, last])
        return self.model.lm_head(hidden).float()
