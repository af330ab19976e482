"""Weights streamed from the trainer to the engines over a process group, in buckets (SGLang's protocol).

The trainer is rank 0 of a group of its own ("weight_update_group"); each engine server takes the ranks from
its `rank_offset` (one per tensor-parallel rank). Every update is a sequence of buckets: the trainer tells the
engines the bucket's names, dtypes and shapes (`/update_weights_from_distributed`, `load_format` =
"flattened_bucket") and broadcasts the bucket as one flat byte tensor, each tensor's bytes in order; the last
bucket carries the new weight version. NCCL on GPUs; gloo on CPUs (`areal serve` and SGLang's CPU server).

The group is separate from any default process group (a trainer under torchrun has its own): it is built with
torch's process-group helper the way SGLang builds it, so both ends meet at one TCP rendezvous.
"""
from __future__ import annotations

import datetime
import math
from collections.abc import Container, Iterable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import torch

FLATTENED_BUCKET = "flattened_bucket"
WEIGHT_GROUP = "weight_update_group"   # SGLang's default group name


def init_custom_process_group(backend: str, init_method: str, world_size: int, rank: int, group_name: str,
                              timeout: float = 300.0) -> Any:
    """A process group of `world_size` ranks that meet at `init_method` (tcp://HOST:PORT; rank 0 hosts the
    store), independent of torch.distributed's default group (which need not exist).

    The store is made here rather than by torch's `rendezvous`, which under torchrun (an FSDP trainer's rank 0)
    would join torchrun's own store instead of hosting this one; the keys are the same as SGLang's."""
    from torch.distributed import TCPStore
    from torch.distributed.distributed_c10d import Backend, PrefixStore, _new_process_group_helper, _world

    address = urlparse(init_method)
    if address.scheme != "tcp" or not address.hostname or not address.port:
        raise ValueError(f"init_method must be tcp://HOST:PORT, got {init_method!r}")
    wait = datetime.timedelta(seconds=timeout)
    store = TCPStore(address.hostname, address.port, world_size, is_master=rank == 0, timeout=wait,
                     multi_tenant=True)
    group, _ = _new_process_group_helper(world_size, rank, [], Backend(backend), PrefixStore(group_name, store),
                                         group_name=group_name, backend_options=None, timeout=wait)
    _world.pg_group_ranks[group] = {i: i for i in range(world_size)}
    return group


@dataclass(frozen=True)
class Bucket:
    """One broadcast: these tensors' bytes, one after another."""
    names: list[str]
    dtypes: list[str]          # torch dtype names without "torch.", as SGLang reads them
    shapes: list[list[int]]

    @property
    def nbytes(self) -> int:
        return sum(_itemsize(d) * math.prod(s) for d, s in zip(self.dtypes, self.shapes))

    def to_json(self) -> dict[str, Any]:
        return {"names": self.names, "dtypes": self.dtypes, "shapes": self.shapes, "load_format": FLATTENED_BUCKET}


def _itemsize(dtype: str) -> int:
    return getattr(torch, dtype).itemsize


def buckets(named_tensors: Iterable[tuple[str, torch.Tensor]], cap_bytes: int
            ) -> Iterator[tuple[Bucket, list[torch.Tensor]]]:
    """The tensors grouped in order into buckets of at most `cap_bytes` (a tensor larger than the cap is a
    bucket of its own): the most memory one broadcast holds beyond the weights themselves."""
    names: list[str] = []
    tensors: list[torch.Tensor] = []
    size = 0
    for name, tensor in named_tensors:
        nbytes = tensor.numel() * tensor.element_size()
        if tensors and size + nbytes > cap_bytes:
            yield _bucket(names, tensors), tensors
            names, tensors, size = [], [], 0
        names.append(name)
        tensors.append(tensor)
        size += nbytes
    if tensors:
        yield _bucket(names, tensors), tensors


def _bucket(names: list[str], tensors: list[torch.Tensor]) -> Bucket:
    return Bucket(list(names), [str(t.dtype).removeprefix("torch.") for t in tensors], [list(t.shape) for t in tensors])


def flatten(tensors: list[torch.Tensor]) -> torch.Tensor:
    """The tensors' bytes, concatenated (uint8), in order."""
    return torch.cat([t.detach().contiguous().reshape(-1).view(torch.uint8) for t in tensors])


def unflatten(flat: torch.Tensor, bucket: Bucket) -> list[tuple[str, torch.Tensor]]:
    """`flatten`'s inverse: (name, tensor) views into `flat`."""
    out, offset = [], 0
    for name, dtype, shape in zip(bucket.names, bucket.dtypes, bucket.shapes):
        size = _itemsize(dtype) * math.prod(shape)
        out.append((name, flat[offset:offset + size].view(getattr(torch, dtype)).reshape(shape)))
        offset += size
    if offset != flat.numel():
        raise ValueError(f"bucket of {flat.numel()} bytes holds {offset} bytes of tensors")
    return out


def check_bucket(data: dict[str, Any]) -> Bucket:
    """A bucket from an /update_weights_from_distributed body; ValueError naming what is wrong."""
    names, dtypes, shapes = data.get("names"), data.get("dtypes"), data.get("shapes")
    if not (isinstance(names, list) and isinstance(dtypes, list) and isinstance(shapes, list)) or not names:
        raise ValueError("names, dtypes and shapes must be non-empty lists")
    if not len(names) == len(dtypes) == len(shapes):
        raise ValueError(f"names, dtypes and shapes differ in length ({len(names)}, {len(dtypes)}, {len(shapes)})")
    for dtype in dtypes:
        if not isinstance(getattr(torch, str(dtype), None), torch.dtype):
            raise ValueError(f"unknown dtype {dtype!r}")
    for shape in shapes:
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise ValueError(f"a shape must be a list of non-negative integers, got {shape!r}")
    load_format = data.get("load_format") or FLATTENED_BUCKET
    if load_format != FLATTENED_BUCKET:
        raise ValueError(f"load_format {load_format!r} is not supported; this engine takes {FLATTENED_BUCKET!r}")
    return Bucket([str(n) for n in names], [str(d) for d in dtypes], [list(s) for s in shapes])


def receive_bucket(group: Any, bucket: Bucket, device: str | torch.device = "cpu") -> list[tuple[str, torch.Tensor]]:
    """Receive one bucket broadcast by rank 0 of `group`."""
    flat = torch.empty(bucket.nbytes, dtype=torch.uint8, device=device)
    torch.distributed.broadcast(flat, src=0, group=group)
    return unflatten(flat, bucket)


def send_bucket(group: Any, tensors: list[torch.Tensor]) -> None:
    """Broadcast one bucket from rank 0 of `group`."""
    torch.distributed.broadcast(flatten(tensors), src=0, group=group)


LORA_A, LORA_B, BASE_LAYER = ".lora_A.default.weight", ".lora_B.default.weight", ".base_layer."


def merge_lora(base: torch.Tensor, lora_a: torch.Tensor, lora_b: torch.Tensor, scale: float) -> torch.Tensor:
    """W + scale x B A (LoRA, Hu et al. 2021), computed in float32 and returned in W's dtype: what the engines
    serve for a module with adapters (the same arithmetic for published and streamed weights)."""
    return (base.float() + scale * (lora_b.float() @ lora_a.float())).to(base.dtype)


def is_adapter(name: str) -> bool:
    return LORA_A in name or LORA_B in name


def adapted_module(name: str, names: Container[str]) -> str | None:
    """The module whose LoRA-adapted base weight `name` is (peft's `m.base_layer.weight`, with `m.lora_A...` among
    `names`), else None."""
    suffix = BASE_LAYER + "weight"
    module = name[:-len(suffix)]
    return module if name.endswith(suffix) and module + LORA_A in names else None


def served_name(name: str) -> str:
    """A parameter's name in the served (merged) model: peft's `m.base_layer.weight` is `m.weight`."""
    return name.replace(BASE_LAYER, ".")


class WeightSender:
    """The trainer's side: a model's weights, a bucket at a time, to the engines (rank 0 of a weight group).

    Works on a plain module and on FSDP2 shards alike: every rank of a sharded model stages the same plan and
    calls `send` for every bucket (gathering a parameter is collective); only the rank that joined the group
    (the trainer's rank 0) broadcasts. At most one bucket of full tensors exists at a time beyond the model.
    Names are `named_parameters()`' (a tied output head is its embedding, sent once); `changed_only` plans only
    the parameters the optimizer can change (requires_grad): with frozen weights, a delta update. A model with
    LoRA adapters (peft, `lora_scale` = alpha / rank) sends each adapted weight merged (`merge_lora`) under the
    served model's name; with `changed_only`, only those and other trainable weights."""

    def __init__(self, model: torch.nn.Module, lora_scale: float | None = None) -> None:
        self.model = model
        self.lora_scale = lora_scale
        self.group: Any = None
        self._plan: list[tuple[Bucket, list[tuple[torch.Tensor, ...]]]] = []

    def join(self, init_method: str, world_size: int, group_name: str = WEIGHT_GROUP, backend: str = "gloo",
             timeout: float = 300.0) -> None:
        """Join as rank 0; returns once every engine rank has joined too."""
        if self.group is not None:
            raise RuntimeError("this trainer already is in a weight update group")
        self.group = init_custom_process_group(backend, init_method, world_size, 0, group_name, timeout)

    def leave(self) -> None:
        if self.group is not None:
            torch.distributed.destroy_process_group(self.group)
            self.group = None

    def stage(self, cap_bytes: int, changed_only: bool = False) -> list[Bucket]:
        """Plan the next update's buckets (no tensor is gathered yet)."""
        entries = [(name, parts) for name, parts, trainable in self._entries() if trainable or not changed_only]
        parts_of = dict(entries)
        # a shard's numel and shape are its full tensor's; a merged weight's are its base weight's
        self._plan = [(bucket, [parts_of[name] for name in bucket.names])
                      for bucket, _ in buckets([(name, parts[0]) for name, parts in entries], cap_bytes)]
        return [bucket for bucket, _ in self._plan]

    def _entries(self) -> Iterator[tuple[str, tuple[torch.Tensor, ...], bool]]:
        """(served name, (weight,) or (base, lora_A, lora_B), whether an optimizer step changes it)."""
        named = dict(self.model.named_parameters())
        for name, param in named.items():
            if is_adapter(name):
                continue
            module = adapted_module(name, named)
            if module is not None:
                yield served_name(name), (param, named[module + LORA_A], named[module + LORA_B]), True
            else:
                yield served_name(name), (param,), param.requires_grad

    def tensors(self, index: int) -> list[tuple[str, torch.Tensor]]:
        """Bucket `index`'s full tensors (a copy for a shard or a merged weight, the parameter's data otherwise).
        Every rank of a sharded model calls it; a shard is gathered onto the sharding's rank 0 alone, the one
        that sends (the others get [])."""
        bucket, parts = self._plan[index]
        out = []
        for name, part in zip(bucket.names, parts):
            if len(part) > 1 and self.lora_scale is None:
                raise ValueError("a model with LoRA adapters needs lora_scale (alpha / rank)")
            full = [gather_full(p) for p in part]
            if full[0] is not None:
                out.append((name, full[0] if len(full) == 1 else merge_lora(*full, self.lora_scale)))
        return out

    def send(self, index: int) -> None:
        """Gather bucket `index` and broadcast it (the rank in the group) while the engines receive it."""
        full = [tensor for _, tensor in self.tensors(index)]
        if self.group is not None:
            send_bucket(self.group, full)


def gather_full(tensor: torch.Tensor, dst: int = 0) -> torch.Tensor | None:
    """`tensor` whole: a plain tensor as it is; a DTensor (an FSDP2 shard) gathered onto rank `dst` of its mesh
    alone, the other ranks sending their shard and getting None. Every rank of the mesh must call it.

    DTensor.full_tensor() all-gathers: every rank held each full tensor in turn, at 0.5B a 545 MB embedding and
    its Adam moments on top of the state the rank shards, for a copy only rank 0 writes or sends. A shard along
    dim 0 of a 1-D mesh (FSDP2's) is gathered directly into rank `dst`'s result; any other layout falls back to
    full_tensor()."""
    from torch.distributed.tensor import DTensor, Shard

    if not isinstance(tensor, DTensor):
        return tensor.detach()
    mesh = tensor.device_mesh
    mine = torch.distributed.get_rank() == int(mesh.mesh.flatten()[dst])
    if mesh.ndim != 1 or len(tensor.placements) != 1 or type(tensor.placements[0]) is not Shard \
            or tensor.placements[0].dim != 0:
        full = tensor.full_tensor().detach()
        return full if mine else None
    group = mesh.get_group()
    ranks, rows = torch.distributed.get_world_size(group), tensor.shape[0]
    if rows == 0:   # nothing to gather (every rank sees the same global shape: all skip the collective)
        return tensor.to_local().detach().new_empty(tensor.shape) if mine else None
    chunk = -(-rows // ranks)   # Shard(0) splits as torch.chunk does: the last shards shorter, or empty
    local = tensor.to_local().detach()
    if local.shape[0] != chunk:
        local = torch.cat([local, local.new_zeros((chunk - local.shape[0], *local.shape[1:]))])
    root = torch.distributed.get_global_rank(group, dst)
    if not mine:
        torch.distributed.gather(local.contiguous(), None, dst=root, group=group)
        return None
    full = torch.empty((chunk * ranks, *local.shape[1:]), dtype=local.dtype, device=local.device)
    torch.distributed.gather(local.contiguous(), list(full.split(chunk)), dst=root, group=group)
    return full[:rows]
