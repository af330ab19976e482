"""Freed tensor memory given back to the operating system at once (glibc's malloc)."""
from __future__ import annotations

import ctypes
import os

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
