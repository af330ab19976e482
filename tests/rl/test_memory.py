"""return_freed_memory: tensors of a few MB that a trainer frees go back to the operating system, not into glibc's
heap, where they fragmented it and the process kept their memory (an FSDP rank at 0.5B: 6.52 GB peak, 5.86 with).
setup_objects_frozen: what a run set up stays out of the garbage collector's full passes while its steps run."""
from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import ctypes, sys, psutil, torch
    from areal_core.rl.memory import return_freed_memory

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                         "fsmblks", "uordblks", "fordblks", "keepcost")]

    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = MallInfo2
    if sys.argv[1] == "on":
        assert return_freed_memory()
    rss = lambda: psutil.Process().memory_info().rss
    big = torch.ones(5 << 20)   # 20 MB: mapped on its own; freeing it raises glibc's default threshold to 20 MB
    del big
    before, mapped = rss(), libc.mallinfo2().hblks
    blocks = [torch.ones(1 << 20) for _ in range(64)]   # 64 x 4 MB
    mapped = libc.mallinfo2().hblks - mapped
    held = rss() - before
    del blocks
    print(mapped, held >> 20, (rss() - before) >> 20)
""")


def run(setting: str) -> tuple[int, int, int]:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_MMAP_THRESHOLD_"}
    out = subprocess.run([sys.executable, "-c", SCRIPT, setting], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    mapped, held, left = map(int, out.stdout.split())
    return mapped, held, left


def test_freed_tensors_of_a_few_mb_leave_the_process():
    mapped, held, left = run("on")
    assert mapped == 64 and held >= 250 and left < 32, (mapped, held, left)
    # what it changes: by default, after a 20 MB block was freed, glibc puts 4 MB tensors in its heap
    assert run("off")[0] == 0


def test_the_users_malloc_setting_stands(monkeypatch):
    from areal_core.rl.memory import return_freed_memory

    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    assert return_freed_memory() is False


class Node:
    def __init__(self) -> None:
        self.me = self   # a reference cycle: only the collector frees it


def test_setup_objects_are_frozen_within_and_given_back_after():
    import weakref

    from areal_core.rl.memory import setup_objects_frozen

    frozen_before = gc.get_freeze_count()
    garbage, kept = Node(), Node()
    dead = weakref.ref(garbage)
    del garbage
    with setup_objects_frozen():
        assert dead() is None   # garbage on entry is collected, not frozen for the run's length
        assert gc.get_freeze_count() > frozen_before + 1000
        made = Node()
        gone = weakref.ref(made)
        del made
        gc.collect()
        assert gone() is None   # what the steps make is collected as ever
    assert gc.get_freeze_count() == frozen_before and kept.me is kept


def test_a_runs_steps_run_with_its_setup_frozen(tmp_path):
    """The production step loop (here on the simulated cluster, which runs it unchanged) freezes what was set up,
    and gives it back when the run ends."""
    from areal_core import hookimpl
    from areal_core.engine.model import build_char_tokenizer
    from areal_core.plan.engine import GenerationCosts
    from areal_core.plan.simulate import ClusterCosts, simulate
    from areal_core.plan.trainer import TrainingCosts
    from areal_core.plugins import get_plugin_manager, reset_plugin_manager

    frozen = []

    class Listener:
        @hookimpl
        def on_train_step(self, step, policy_version, metrics, run_dir):
            frozen.append(gc.get_freeze_count())

    reset_plugin_manager()
    get_plugin_manager().register(Listener(), "freeze-listener")
    try:
        simulate(["task=arithmetic", "steps=3", "rollout.batch_size=4", "rollout.group_size=2", "warmup.enabled=false",
                  "eval_task=null", f"output_dir={tmp_path}"],
                 ClusterCosts(GenerationCosts(step_s=0.01), TrainingCosts(proximal_token_s=1e-4, update_token_s=1e-4)),
                 build_char_tokenizer(), tmp_path / "run")
    finally:
        reset_plugin_manager()
    assert len(frozen) == 3 and min(frozen) > 10_000, frozen   # the imported modules alone are tens of thousands
    assert gc.get_freeze_count() == 0
