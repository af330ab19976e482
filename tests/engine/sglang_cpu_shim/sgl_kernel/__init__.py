"""TEST SCAFFOLDING, not product: a pure-torch stand-in for the one piece of `sgl-kernel` that SGLang's
CPU path imports, so that a real SGLang server runs on a CPU-only test machine.

sgl-kernel (PyPI: sglang-kernel) ships CUDA/ROCm builds only. With SGLANG_USE_CPU_ENGINE=1, SGLang 0.5.23
imports two names from it on the text-generation path (dense model, torch_native attention):

- `assign_req_to_token_pool_cpu` (sglang/srt/mem_cache/allocation.py) writes newly allocated KV-cache
  locations into the request-to-token table; mirrors the Triton kernel `assign_req_to_token_pool` there.
- `copy_all_layer_kv_cache_cpu` (sglang/kernels/ops/kvcache/cache_move.py) copies KV-cache rows between
  locations in every layer's buffer; mirrors the Triton kernel `copy_all_layer_kv_cache_tiled` there.

Both are implemented with plain tensor indexing / memmove. The module deliberately registers no
`torch.ops.sgl_kernel` operators, so SGLang's Intel-AMX fast paths (`_is_intel_amx_backend_available`)
stay off.

Only tests/engine/test_sglang_real.py puts this directory on the server's PYTHONPATH.
"""
import ctypes

import torch

__version__ = "0.0.0+areal-cpu-test-shim"


def assign_req_to_token_pool_cpu(req_pool_indices: torch.Tensor, req_to_token: torch.Tensor,
                                 start_offset: torch.Tensor, end_offset: torch.Tensor,
                                 out_cache_loc: torch.Tensor, pool_len: int) -> None:
    """For request i: req_to_token[req_pool_indices[i], start_offset[i]:end_offset[i]] = the next
    (end_offset[i] - start_offset[i]) entries of out_cache_loc (requests laid out one after another)."""
    del pool_len  # the row length of req_to_token; kept for the kernel's signature
    pos = 0
    for row, start, end in zip(req_pool_indices.tolist(), start_offset.tolist(), end_offset.tolist()):
        n = end - start
        if n > 0:
            req_to_token[row, start:end] = out_cache_loc[pos:pos + n].to(req_to_token.dtype)
        pos += n


def copy_all_layer_kv_cache_cpu(data_ptrs: torch.Tensor, strides: torch.Tensor, tgt_loc: torch.Tensor,
                                src_loc: torch.Tensor) -> None:
    """For every buffer b (base address data_ptrs[b], row size strides[b] bytes): row tgt_loc[j] = row
    src_loc[j]. All source rows are read before any target is written (safe in place, as the kernel)."""
    pairs = list(zip(tgt_loc.tolist(), src_loc.tolist()))
    for base, stride in zip(data_ptrs.tolist(), strides.tolist()):
        rows = [ctypes.string_at(base + src * stride, stride) for _, src in pairs]
        for (tgt, _), row in zip(pairs, rows):
            ctypes.memmove(base + tgt * stride, row, stride)


def __getattr__(name: str):
    """Other CPU kernels SGLang imports at module level but never calls on the dense text path
    (speculative decoding, mamba, MoE, quantised matmuls): importable, and a clear error if ever called."""
    if not name.endswith("_cpu"):
        raise AttributeError(f"module 'sgl_kernel' (areal CPU test shim) has no attribute {name!r}")

    def missing(*args, **kwargs):
        raise NotImplementedError(f"sgl_kernel.{name} is not provided by the areal CPU test shim "
                                  "(tests/engine/sglang_cpu_shim); only the dense text-generation path is")

    missing.__name__ = name
    return missing
