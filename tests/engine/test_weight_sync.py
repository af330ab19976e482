"""engine/weight_sync.py: the pieces of weight sync over a process group (issue 22, part 2, in progress) — buckets
under a memory cap in order, SGLang's flattened-bucket byte layout, request checks, and a real two-process gloo
group that carries a model's weights bit-exact."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from areal_core.engine.model import init_model, load_model
from areal_core.engine.weight_sync import buckets, check_bucket, flatten, unflatten


def test_buckets_keep_order_stay_under_the_cap_and_a_larger_tensor_goes_alone():
    tensors = [("a", torch.zeros(10)), ("b", torch.zeros(10)), ("big", torch.zeros(100)), ("c", torch.zeros(5))]
    grouped = [(bucket.names, bucket.nbytes) for bucket, _ in buckets(tensors, cap_bytes=80)]
    assert grouped == [(["a", "b"], 80), (["big"], 400), (["c"], 20)]


def test_flatten_is_each_tensors_bytes_in_order_and_unflatten_inverts_it():
    tensors = [("w", torch.randn(3, 4)), ("ids", torch.arange(5)), ("h", torch.randn(2, 2).bfloat16())]
    [(bucket, values)] = list(buckets(tensors, cap_bytes=1 << 20))
    flat = flatten(values)
    assert flat.dtype == torch.uint8 and flat.numel() == bucket.nbytes == 48 + 40 + 8
    assert torch.equal(flat[:48], tensors[0][1].reshape(-1).view(torch.uint8))  # SGLang's layout
    assert all(n == m and torch.equal(a, b) for (n, a), (m, b) in zip(tensors, unflatten(flat, bucket)))
    assert check_bucket(json.loads(json.dumps(bucket.to_json()))) == bucket


@pytest.mark.parametrize("body, message", [
    ({"names": [], "dtypes": [], "shapes": []}, "non-empty lists"),
    ({"names": ["a"], "dtypes": ["float32", "float32"], "shapes": [[1]]}, "differ in length"),
    ({"names": ["a"], "dtypes": ["float33"], "shapes": [[1]]}, "unknown dtype 'float33'"),
    ({"names": ["a"], "dtypes": ["float32"], "shapes": [[-1]]}, "non-negative integers"),
    ({"names": ["a"], "dtypes": ["float32"], "shapes": [[1]], "load_format": "direct"}, "not supported"),
])
def test_bad_bucket_requests_are_refused_naming_the_problem(body, message):
    with pytest.raises(ValueError, match=message):
        check_bucket(body)


RANK = """
import json, sys, torch
from areal_core.engine.model import load_model
from areal_core.engine.weight_sync import buckets, check_bucket, init_custom_process_group, receive_bucket, send_bucket
rank, port, model, cap = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
group = init_custom_process_group("gloo", f"tcp://127.0.0.1:{port}", 2, rank, "weight_update_group", timeout=60)
plan = list(buckets(load_model(model).named_parameters(), cap))
for bucket, tensors in plan:  # the receiver learns each bucket from its JSON, as an engine does over HTTP
    if rank == 0:
        send_bucket(group, tensors)
    else:
        for name, tensor in receive_bucket(group, check_bucket(json.loads(json.dumps(bucket.to_json())))):
            torch.save(tensor, sys.argv[5] + "/" + name)
# both sides done, then the group is left as WeightSender.leave leaves it: a process that exits with gloo's threads
# still up can abort ("terminate called without an active exception", rank 0 in one CI run)
torch.distributed.barrier(group=group)
torch.distributed.destroy_process_group(group)
print(len(plan))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_models_weights_cross_a_two_process_gloo_group_bit_exact(tmp_path):
    model = init_model(tmp_path / "model", seed=4, num_hidden_layers=2, hidden_size=64, intermediate_size=192)
    (tmp_path / "received").mkdir()
    port, cap = free_port(), 64 * 1024

    def command(rank: int) -> list[str]:
        return [sys.executable, "-c", RANK, str(rank), str(port), str(model), str(cap), str(tmp_path / "received")]

    receiver = subprocess.Popen(command(1), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sender = subprocess.run(command(0), capture_output=True, text=True, timeout=120)
    out, err = receiver.communicate(timeout=120)
    assert sender.returncode == 0 and receiver.returncode == 0, sender.stderr + err
    assert int(sender.stdout) == int(out) > 1  # more than one bucket under the cap
    expected = dict(load_model(model).named_parameters())
    received = {p.name: torch.load(p) for p in Path(tmp_path / "received").iterdir()}
    assert set(received) == set(expected)
    assert all(torch.equal(received[name], expected[name].detach()) for name in expected)


GATHER_RANK = """
import sys, torch, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor
from areal_core.engine.weight_sync import gather_full
rank, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=3)
mesh = init_device_mesh("cpu", (3,))
whole = {"7 rows": torch.arange(7 * 5, dtype=torch.float32).reshape(7, 5),   # shards of 3, 3 and 1 rows
         "2 rows": torch.arange(2 * 4, dtype=torch.bfloat16).reshape(2, 4),  # rank 2's shard is empty
         "9 long": torch.arange(9, dtype=torch.float64),
         "no rows": torch.empty(0, 3)}
got = {}
for name, tensor in whole.items():
    got[name] = gather_full(distribute_tensor(tensor, mesh, [Shard(0)]))
    got[name + " on 1"] = gather_full(distribute_tensor(tensor, mesh, [Shard(0)]), dst=1)
    got[name + " replicated"] = gather_full(distribute_tensor(tensor, mesh, [Replicate()]))
    got[name + " plain"] = gather_full(tensor)
torch.save({name: t for name, t in got.items()}, f"{out}/{rank}.pt")
dist.barrier()  # all ranks done before any leaves, as the FSDP worker closes: a rank exiting with gloo's threads up
dist.destroy_process_group()  # can abort ("terminate called without an active exception", one CI run)
"""


def test_a_shard_is_gathered_whole_onto_one_rank_alone_however_unevenly_its_rows_divide(tmp_path):
    """gather_full: every rank of the mesh calls it; the destination gets the exact tensor (uneven and empty
    shards, any dtype; any other layout by full_tensor), the others None; a plain tensor is itself everywhere."""
    port = free_port()
    ranks = [subprocess.Popen([sys.executable, "-c", GATHER_RANK, str(rank), str(port), str(tmp_path)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in range(3)]
    for process in ranks:
        _, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
    results = [torch.load(tmp_path / f"{rank}.pt") for rank in range(3)]
    whole = {"7 rows": torch.arange(7 * 5, dtype=torch.float32).reshape(7, 5),
             "2 rows": torch.arange(2 * 4, dtype=torch.bfloat16).reshape(2, 4),
             "9 long": torch.arange(9, dtype=torch.float64), "no rows": torch.empty(0, 3)}
    for name, tensor in whole.items():
        for key, holder in [(name, 0), (name + " on 1", 1), (name + " replicated", 0)]:
            for rank, result in enumerate(results):
                if rank == holder:
                    assert result[key].dtype == tensor.dtype and torch.equal(result[key], tensor), (key, rank)
                else:
                    assert result[key] is None, (key, rank)
        assert all(torch.equal(result[name + " plain"], tensor) for result in results)
