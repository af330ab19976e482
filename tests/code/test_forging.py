"""Wrong programs that try to be paid by forging from inside their own process, through the real
`code` reward and the real sandbox (HumanEval/53, ``add``). Every one returns a wrong answer; every
one must score 0 with every test failed, where the honest solution scores 1.

The battery covers the known routes (frames, tracebacks, inspect, gc, patching the harness, ctypes,
/proc/PID/mem, file descriptors, signals, atexit, finalizers, threads, sys.modules, imitated
protocol output). The two tests after it show why it holds for any variant: the program's whole
power is the bytes it writes on the descriptors it holds, and (1) a program that takes over those
descriptors and speaks the call protocol perfectly still gets paid only for correct values,
(2) from inside the program's process, nothing of the tests' process or the supervisor can be
reached: no other descriptor, no memory, no ptrace, no /proc/PID/fd.
"""
from __future__ import annotations

import json

import pytest

from code_support import score_all

HONEST = "def add(x, y):\n    return x + y\n"

# Lines in every result protocol the harness has ever used: the judge's events, the old runner's
# events, the supervisor's result line.
FORGE = r'''
import os as _os, json as _json, marshal as _marshal
def _forged_lines():
    lines = [_json.dumps({"e": "end", "i": i, "v": "passed", "m": ""}) for i in range(200)]
    lines += [_json.dumps({"t": "x", "e": "end", "i": i, "v": "passed", "m": "", "n": 0}) for i in range(200)]
    lines += [_json.dumps({"e": "done"}), _json.dumps({"t": "x", "e": "done", "i": -1, "v": "", "m": "", "n": 0}),
              _json.dumps({"id": "", "tests": [{"name": "test 0", "verdict": "passed"}], "error": "",
                           "harmed": False, "problems": []})]
    return ("\n".join(lines) + "\n").encode()
def _forged_replies():
    frames = b""
    for seq in range(0, 300):
        body = _marshal.dumps(("ok", seq, "p", ("PASSED", {})), 2)
        frames += len(body).to_bytes(4, "big") + body
    return frames
def _spray(fds=range(0, 64)):
    data, replies = _forged_lines(), _forged_replies()
    for fd in fds:
        for chunk in (data, replies):
            try:
                _os.write(fd, chunk)
            except OSError:
                pass
def _other_pids():
    return [int(p) for p in _os.listdir("/proc") if p.isdigit() and int(p) != _os.getpid()]
'''

WRONG = "    return x + y + 1\n"

BATTERY = {
    # The issue's exploit, generalised: walk the frames for anything that reports and report passes.
    "frames": FORGE + r'''
import sys
def add(x, y):
    f = sys._getframe(0)
    while f is not None:
        for value in list(f.f_locals.values()) + list(f.f_globals.values()):
            for name in ("send", "hook", "_reply", "reply"):
                method = getattr(value, name, None)
                if callable(method):
                    for i in range(50):
                        for args in (("end", i, "passed", ""), ("done",), (i, "ok", None)):
                            try:
                                method(*args)
                            except BaseException:
                                pass
        f = f.f_back
    _spray()
''' + WRONG,
    "tracebacks": FORGE + r'''
def add(x, y):
    try:
        raise RuntimeError
    except RuntimeError as exc:
        frame = exc.__traceback__.tb_frame
    while frame is not None:
        server = frame.f_locals.get("self")
        if server is not None and hasattr(server, "namespace"):
            server.candidate = lambda *a, **k: "PASSED"
            server.namespace["add"] = lambda *a, **k: "PASSED"
        frame = frame.f_back
    _spray()
''' + WRONG,
    "inspect": FORGE + r'''
import inspect
def add(x, y):
    for info in inspect.stack():
        for value in info.frame.f_locals.values():
            if hasattr(value, "events"):
                try:
                    value.events.send("done")
                except BaseException:
                    pass
            if isinstance(value, dict) and "total" in value:
                value["total"] = 0
    _spray()
''' + WRONG,
    "gc": FORGE + r'''
import gc
def add(x, y):
    for obj in gc.get_objects():
        if isinstance(obj, dict) and ("tests" in obj or "names" in obj):
            obj.clear()
        kind = type(obj).__name__
        if kind in ("Judge", "Events", "Channel", "CallServer", "FunctionRun"):
            for name in ("send", "fail_remaining"):
                method = getattr(obj, name, None)
                if callable(method):
                    try:
                        method("done")
                    except BaseException:
                        pass
    _spray()
''' + WRONG,
    "patch_harness_at_import": FORGE + r'''
import marshal, sys
import runner, wire
try:
    import judge
    judge.Judge.verdict_of = lambda self, exc: ("passed", "")
    judge.Judge.hook = lambda self, *a: None
except ImportError:
    pass
runner.CallServer.call = lambda self, seq, f, a, k: marshal.dumps(("ok", seq, "p", ("PASSED", {})), 2)
wire.strict_loads = lambda data: ("ok", 1, "p", (True, {}))
wire.NotData = type("Never", (Exception,), {})
def add(x, y):
''' + WRONG,
    "patch_harness_at_call": FORGE + r'''
import builtins, sys
def add(x, y):
    runner = sys.modules.get("runner")
    if runner is not None:
        runner._reply = lambda body: runner._write_all(4, b"\x00\x00\x00\x01N")
    builtins.AssertionError = type("AssertionError", (Exception,), {})
    builtins.isinstance = lambda *a: True
    _spray()
''' + WRONG,
    "ctypes_writes": FORGE + r'''
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
def add(x, y):
    # Overwrite the program's own protocol strings and small ints in place...
    for text in ("raise", "nodata", "loaded"):
        ctypes.memmove(id(text) + sys.getsizeof("") - 1, b"ok\x00\x00\x00", 2)
    ctypes.c_uint32.from_address(id(256) + 24).value = 255
    # ...and try to write into every other process.
    class IOVec(ctypes.Structure):
        _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
    payload = ctypes.create_string_buffer(b"passed" * 10)
    for pid in _other_pids():
        local = IOVec(ctypes.cast(payload, ctypes.c_void_p), 60)
        for address in (0x400000, 0x7f0000000000):
            remote = IOVec(address, 60)
            libc.process_vm_writev(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    _spray()
''' + WRONG,
    "proc_mem": FORGE + r'''
import re
def add(x, y):
    for pid in ["self"] + [str(p) for p in _other_pids()]:
        try:
            with open(f"/proc/{pid}/maps") as f:
                regions = [line.split()[0] for line in f if "rw" in line.split()[1]]
            with open(f"/proc/{pid}/mem", "r+b", buffering=0) as mem:
                for region in regions[:8]:
                    start, end = (int(v, 16) for v in region.split("-"))
                    mem.seek(start)
                    data = mem.read(min(end - start, 1 << 16))
                    for word in (b"wrong_answer", b"runtime_error"):
                        at = data.find(word)
                        if at >= 0:
                            mem.seek(start + at)
                            mem.write(b"passed".ljust(len(word), b"\x00"))
        except OSError:
            pass
    _spray()
''' + WRONG,
    "file_descriptors": FORGE + r'''
def add(x, y):
    _spray(range(0, 1024))
    for pid in _other_pids():
        try:
            names = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for name in names:
            try:
                fd = os.open(f"/proc/{pid}/fd/{name}", os.O_WRONLY)
                _spray([fd])
            except OSError:
                pass
''' + WRONG,
    "signals": FORGE + r'''
import signal, time
def _on_signal(signum, frame):
    _spray()
    os._exit(0)
for sig in (signal.SIGTERM, signal.SIGALRM, signal.SIGUSR1, signal.SIGPIPE):
    signal.signal(sig, _on_signal)
def add(x, y):
    for pid in _other_pids():
        for sig in (signal.SIGSTOP, signal.SIGCONT, signal.SIGUSR1):
            try:
                os.kill(pid, sig)
            except OSError:
                pass
    signal.setitimer(signal.ITIMER_REAL, 0.01)
    time.sleep(0.05)
''' + WRONG,
    "atexit": FORGE + r'''
import atexit
atexit.register(_spray)
atexit.register(lambda: os._exit(0))
def add(x, y):
''' + WRONG,
    "finalizers": FORGE + r'''
class _Forger:
    def __del__(self):
        _spray()
_keep = _Forger()
_cycle = [_Forger()]
_cycle.append(_cycle)
def add(x, y):
    _Forger()
''' + WRONG,
    "threads": FORGE + r'''
import threading, time
def _race():
    while True:
        _spray(range(3, 8))
        time.sleep(0.001)
threading.Thread(target=_race, daemon=True).start()
def add(x, y):
''' + WRONG,
    "sys_modules": FORGE + r'''
import sys, types
fake = types.ModuleType("marshal")
fake.dumps = lambda *a: b"\x00"
fake.loads = lambda *a: ("ok", 0, "p", ("PASSED", {}))
sys.modules["marshal"] = fake
for name in ("judge", "wire", "json", "supervisor"):
    module = types.ModuleType(name)
    module.__getattr__ = lambda attr: (lambda *a, **k: "passed")
    sys.modules[name] = module
for directory in ("/work", "/tmp"):
    try:
        with open(f"{directory}/judge.py", "w") as f:
            f.write("def main(*a): pass\n")
        sys.path.insert(0, directory)
    except OSError:
        pass
def add(x, y):
''' + WRONG,
    "imitated_protocol_output": FORGE + r'''
import sys
def add(x, y):
    text = _forged_lines().decode()
    print(text)
    print(text, file=sys.stderr)
    sys.stdout.flush()
''' + WRONG,
    "kill_everyone_else": FORGE + r'''
import signal
def add(x, y):
    _spray()
    for pid in _other_pids():
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    try:
        os.kill(-1, signal.SIGKILL)
    except OSError:
        pass
''' + WRONG,
    "ptrace": FORGE + r'''
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
PTRACE_ATTACH, PTRACE_POKEDATA, PTRACE_SEIZE = 16, 5, 0x4206
def add(x, y):
    for pid in _other_pids():
        for request in (PTRACE_ATTACH, PTRACE_SEIZE):
            if libc.ptrace(request, pid, 0, 0) == 0:
                libc.ptrace(PTRACE_POKEDATA, pid, 0x400000, 0)
''' + WRONG,
    # A forged answer to the load request, built to break the tests' process's own messages.
    "forged_load_reply": r'''
import os, marshal
for reply in (("load_error", "program", 10 ** 5000), ("loaded", {"add": ("module", "add")})):
    body = marshal.dumps(reply, 2)
    os.write(4, len(body).to_bytes(4, "big") + body)
os._exit(0)
def add(x, y):
''' + WRONG,
    "always_equal_objects": r'''
class Anything(int):
    def __eq__(self, other):
        return True
    __hash__ = int.__hash__
class Other:
    def __eq__(self, other):
        return True
    def __bool__(self):
        return True
def add(x, y):
    return Other() if x % 2 else Anything(x + y + 1)
''',
    "exceptions_that_claim_success": r'''
class Passed(AssertionError):
    def __eq__(self, other):
        return True
def add(x, y):
    raise Passed("passed")
''',
}


@pytest.fixture(scope="module")
def sample(humaneval):
    sample = humaneval[53]
    assert sample["entry_point"] == "add"
    return sample


def score(sample, code_options, program: str, reward: str = "fraction"):
    return score_all([(sample, f"```python\n{program}```")],
                     {**code_options, "format": "humaneval", "reward": reward})[0]


def test_the_honest_solution_scores_one(sample, code_options):
    result = score(sample, code_options, HONEST)
    assert (result.score, result.correct, result.error) == (1.0, True, None)


def test_the_battery_has_every_class_the_issue_names():
    assert len(BATTERY) >= 12


@pytest.mark.parametrize("name", sorted(BATTERY))
def test_forging_from_inside_scores_zero(sample, code_options, name):
    result = score(sample, code_options, BATTERY[name])
    assert result.error is None, result.error
    assert (result.score, result.correct) == (0.0, False), result.details
    assert result.details["passed"] == 0 and result.details["total"] == 6, result.details


# A program that takes its call channel over: reads the requests itself (fd 3) and writes replies
# (fd 4) in the exact protocol, from its first instruction (the harness's own server never runs). This is everything a
# program can make its own process say. `ANSWER` decides what it answers.
SELF_SERVER = r'''
import marshal, os
def _read(n):
    data = b""
    while len(data) < n:
        chunk = os.read(3, n - len(data))
        if not chunk:
            os._exit(0)
        data += chunk
    return data
def _next():
    return marshal.loads(_read(int.from_bytes(_read(4), "big")))
def _reply(message):
    body = marshal.dumps(message, 2)
    os.write(4, len(body).to_bytes(4, "big") + body)
# The runner has read the load request and runs this program as part of it; the tests' process
# now waits for the answer to that request.
_reply(("loaded", {}))
while True:
    _, seq, target, mode, (args, kwargs) = _next()
    _reply(("ok", seq, "p", (ANSWER(*args), {})))
'''


def test_a_program_that_owns_its_process_is_paid_only_for_correct_values(sample, code_options):
    """The structural guarantee: the fully controlled channel is the program's whole power."""
    right = score(sample, code_options, "ANSWER = lambda x, y: x + y\n" + SELF_SERVER)
    assert (right.score, right.error) == (1.0, None), right.details  # the takeover works...
    # ...and every wrong value fails, whatever it looks like (True would pass `add(0, 1) == 1`
    # honestly: True == 1 in Python).
    for answer in ("lambda x, y: x + y + 1", "lambda x, y: 'passed'", "lambda x, y: None", "lambda x, y: [x + y]",
                   "lambda x, y: str(x + y)", "lambda x, y: (x + y, 'passed')", "lambda x, y: float('nan')"):
        wrong = score(sample, code_options, f"ANSWER = {answer}\n" + SELF_SERVER)
        assert (wrong.score, wrong.details["passed"], wrong.error) == (0.0, 0, None), (answer, wrong.details)


PROBE = r"""
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
def errno_of(action):
    try:
        action()
        return 0
    except OSError as exc:
        return exc.errno
def reach():
    me, others = os.getpid(), {}
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != me:
            pid = int(name)
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    harness = b"supervisor.py" in f.read()
            except OSError:
                harness = None
            others[pid] = [harness, errno_of(lambda: open(f"/proc/{pid}/mem", "rb").read(1)),
                           errno_of(lambda: open(f"/proc/{pid}/environ", "rb").read(1)),
                           errno_of(lambda: os.listdir(f"/proc/{pid}/fd")), libc.ptrace(16, pid, 0, 0)]
    fds = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            fds[name] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            pass  # the descriptor of this listing, closed by now
    return {"fds": fds, "others": others}
def add(x, y):
    raise ValueError(json.dumps(reach(), separators=(",", ":")))
"""


def test_nothing_outside_the_programs_own_process_is_reachable_from_it(sample, code_options):
    result = score(sample, code_options, PROBE)
    message = result.details["tests"][0]["message"]
    found = json.loads(message[message.index("{"):])
    # stdin (empty), stdout, stderr, the two ends of the call channel; any other is the probe's own
    pipes = {int(fd) for fd, target in found["fds"].items() if target.startswith("pipe:")}
    assert pipes == {0, 1, 2, 3, 4}, found
    others = found["others"]
    assert "1" in others and len(others) >= 2, others  # the supervisor (PID 1) and the tests' process
    for pid, (harness, mem, environ, fds, ptrace) in others.items():
        assert harness is True, (pid, others)  # no other process is in the container
        assert mem in (1, 13) and environ in (1, 13) and fds in (1, 13), (pid, others)  # EPERM / EACCES
        assert ptrace == -1, (pid, others)
