"""Helpers shared by tests in this folder."""
import threading
import time
from contextlib import contextmanager


def process_is_running(pid):
    """True while `pid` exists and is not a zombie (an orphan may wait a moment to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


class PeakGrowth:
    """How far a process's RSS rose above its value at the start of a `peak_rss_growth` block, in bytes."""

    def __init__(self, process):
        self.process = process
        self.start = self.peak = process.memory_info().rss

    def sample(self):
        self.peak = max(self.peak, self.process.memory_info().rss)

    @property
    def bytes(self):
        return self.peak - self.start


@contextmanager
def peak_rss_growth(process=None):
    """Polls `process`'s RSS (a psutil.Process; this one by default) every 2 ms while the block runs."""
    import psutil

    growth = PeakGrowth(process or psutil.Process())
    done = threading.Event()

    def poll():
        while not done.is_set():
            growth.sample()
            time.sleep(0.002)

    watcher = threading.Thread(target=poll, daemon=True)
    watcher.start()
    try:
        yield growth
    finally:
        done.set()
        watcher.join()
        growth.sample()   # a block shorter than one poll still counts what it left
