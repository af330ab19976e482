"""A trainer's memory: an FSDP rank's in the backward pass, under real torchrun (2 ranks, gloo, CPU), and what a
step leaves behind.

The FSDP root holds the embedding and the output head, tied in Qwen: one [V, H] table that FSDP2 keeps gathered from
the forward pass to the end of the backward, beside its whole gradient. At 0.5B that table and its gradient made an
update peak at 1.6x the rank's theoretical memory (bench/bench_real_size.py). Two things held more than needed: the
gathered table after the head's backward (the embedding's backward reads only the token ids), and gloo's
reduce-scatter, which all-reduces a clone of its input (the table-sized gradient buffer) where FSDP's own buffer can
be reduced in place.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from areal_core.engine.model import init_model
from areal_core.rl.config import TrainerConfig
from areal_core.rl.trainer import LocalTrainer, train_step
from trainer_support import SETTINGS, TEST_MODEL, TOTAL_STEPS, make_batch

pytestmark = pytest.mark.timeout(300)

TORCHRUN = Path(sys.executable).parent / "torchrun"
VOCAB, HIDDEN = 65536, 2048   # a 537 MB table: past glibc's mmap threshold, freed memory leaves RSS at once

SCRIPT = textwrap.dedent("""
    import json, sys, threading, time
    import psutil, torch, torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from areal_core.engine.model import load_model
    from areal_core.rl.config import TrainerConfig
    from areal_core.rl.fsdp_worker import shard_model
    from areal_core.rl.memory import return_freed_memory
    from areal_core.rl.output_head import head_logprobs, hidden_states
    from areal_core.rl.trainer import trainable_model

    return_freed_memory()   # as the FSDP worker does
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    model = trainable_model(load_model(sys.argv[1]), TrainerConfig())
    model = shard_model(model, init_device_mesh("cpu", (2,)))
    process, seen = psutil.Process(), []

    def at_embedding_backward(module, args, output):   # runs just before the embedding's backward
        output.register_hook(lambda grad: seen.append(model.lm_head.weight.untyped_storage().nbytes()))

    model.get_input_embeddings().register_forward_hook(at_embedding_backward)

    def backward_growth(seed):
        torch.manual_seed(seed)
        ids = torch.randint(0, model.config.vocab_size, (1, 64))
        hidden, head = hidden_states(model, input_ids=ids)
        picked, _ = head_logprobs(hidden, head, 1.0, False, (torch.zeros(63, dtype=torch.long), torch.arange(63),
                                                             ids[0, 1:]))
        loss = -picked.mean()
        start, peak, done = process.memory_info().rss, [0], threading.Event()

        def poll():
            while not done.is_set():
                peak[0] = max(peak[0], process.memory_info().rss)
                time.sleep(0.001)

        watcher = threading.Thread(target=poll)
        watcher.start()
        loss.backward()
        done.set()
        watcher.join()
        return max(peak[0], process.memory_info().rss) - start

    backward_growth(0)                 # the first micro-batch: the sharded gradients appear
    growth = backward_growth(1)        # a later one accumulates into them
    print(json.dumps({"rank": dist.get_rank(), "growth": growth, "table_at_embedding_backward": seen}), flush=True)
    dist.barrier()  # every rank done before one leaves: exiting with gloo's threads up can abort
    dist.destroy_process_group()
""")


@pytest.fixture(scope="module")
def wide_vocabulary_model(tmp_path_factory):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=256, num_hidden_layers=1,
                         num_attention_heads=16, num_key_value_heads=2, tie_word_embeddings=True)
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("wide-vocabulary")
    Qwen2ForCausalLM(config).save_pretrained(path)
    return path


def test_a_rank_holds_the_tied_table_once_in_the_backward_pass_not_three_times(wide_vocabulary_model, tmp_path):
    """The backward pass grows a rank by the table's gradient (E) and a little: after the head's backward the
    gathered table is gone (its storage is empty when the embedding's backward runs), so the embedding's own
    gradient and then FSDP's reduce-scatter buffer take its place, and the reduce-scatter adds only the rank's
    shard (measured: 1.09E). Before: the table, its gradient and the embedding's gradient together (2.1E
    measured without the early release), and gloo's clone of the reduce-scatter buffer beside FSDP's (1.5E measured
    with the release but gloo's own reduce-scatter)."""
    table = VOCAB * HIDDEN * 4
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    script = tmp_path / "backward_memory.py"
    script.write_text(SCRIPT)
    out = subprocess.run([str(TORCHRUN), "--nproc-per-node", "2", "--standalone", str(script),
                          str(wide_vocabulary_model)], capture_output=True, text=True, timeout=280, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    ranks = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert sorted(r["rank"] for r in ranks) == [0, 1], out.stdout
    for rank in ranks:
        assert rank["table_at_embedding_backward"] == [0, 0], rank   # both micro-batches
        assert rank["growth"] < 1.3 * table, (rank["growth"] / table, rank)


def test_a_step_leaves_no_gradient_behind(tmp_path):
    """A step's gradients are freed after its last optimizer step: kept, they sat through the next step's pi_prox,
    the weight sync and the checkpoint (at 0.5B, 0.92 GiB of each FSDP rank's 5.3 GiB peak in pi_prox)."""
    model = init_model(tmp_path / "model", seed=0, **TEST_MODEL)
    trainer = LocalTrainer(model, TrainerConfig(**SETTINGS), TOTAL_STEPS)
    metrics = train_step(trainer, make_batch(model, 0), 1.0)
    assert metrics["grad_norm"] > 0   # there were gradients, and the optimizer stepped on them
    assert [name for name, p in trainer.model.named_parameters() if p.grad is not None] == []
