"""Freed tensor memory given back to the operating system at once (glibc's malloc); the objects a run sets up kept
out of the garbage collector's full passes."""
from __future__ import annotations

import contextlib
import ctypes
import gc
import os
from typing import Iterator

M_MMAP_THRESHOLD = -3           # mallopt's parameter number (malloc.h)
MMAP_THRESHOLD_BYTES = 1 << 20


def return_freed_memory() -> bool:
    """Have glibc map every allocation of 1 MB or more on its own, so that it is unmapped when freed.

    By default glibc serves allocations below its mmap threshold from its heap, and raises that threshold (up to
    32 MB) each time a larger block is freed: a trainer's tensors of a few MB then live in the heap, which they
    fragment, and the process keeps their memory after they are freed. At 0.5B an FSDP rank's peak RSS fell from
    6.52 to 5.86 GB with this (bench/RESULTS.md, "Real-size rehearsal"), the step's time unchanged. Returns whether it
    was set: not off glibc, nor when MALLOC_MMAP_THRESHOLD_ is in the environment (the user's setting stands)."""
    if os.environ.get("MALLOC_MMAP_THRESHOLD_"):
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))


@contextlib.contextmanager
def setup_objects_frozen() -> Iterator[None]:
    """Within: the objects alive on entry (the model, tokenizer, engine, trainer, imported modules: hundreds of
    thousands) sit in the collector's permanent generation (gc.freeze), so its full passes look only at what the
    steps make. Without it each full pass walks them all: in a run of the embedded model ~0.1 s every ~5 steps, one
    step in five made ~60% longer (bench/RESULTS.md, "`areal plan` validation: the sync side fixed"). On exit they go
    back (gc.unfreeze), so that a process that goes on after the run (a test, a notebook) can collect them."""
    gc.collect()   # what is garbage already is not frozen
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
