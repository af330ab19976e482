"""Helpers shared by tests in this folder."""


def process_is_running(pid):
    """True while `pid` exists and is not a zombie (an orphan may wait a moment to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"
