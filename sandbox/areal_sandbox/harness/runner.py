"""Run one untrusted program in this fresh interpreter and report to the supervisor.

Started by the supervisor (``python -I -B -c "import runner; runner.main()" MODE``) with:
  fd 0: the test input (stdio mode) or empty; fd 1/2: captured, size-capped by the supervisor;
  fd 3: the job (``marshal``, made by the supervisor), read once and closed before untrusted code runs;
  fd 4: events for the supervisor, one JSON object per line, each carrying the job's token.
It imports as little as it can: interpreter start-up is most of the cost of an execution.

Modes:
  stdio     run the program as ``__main__`` reading stdin; the supervisor judges its stdout.
  function  exec the program, then the (pre-compiled) tests in the same namespace; one event per test.

What this file defends against (function mode), so that a program cannot pass without passing:
  - exiting early (``exit(0)``, ``os._exit(0)``, ``SystemExit`` in the program or a test): the
    supervisor only accepts a run whose ``done`` event, written here after the last test, arrived;
  - objects that claim equality with everything: every value the program's functions return to a
    test must be built from built-in types (a `ReturnGuard` violation fails the test even if the
    test swallowed the exception);
  - tampering left behind by the program: builtins and the standard modules tests use are restored,
    tracing hooks are cleared, a program that leaves threads running fails, and anything the
    program left that breaks this file's own code fails the remaining tests;
  - printing fake results: results travel on fd 4 with a token, never on stdout.
A program that deliberately reads this process's memory to forge events is out of scope of any
in-process check; stdio problems are judged entirely outside this process.
"""
from __future__ import annotations

import builtins
import marshal
import os
import sys

# Standard modules tests use. Function mode imports the cheap ones before the program runs and
# restores them afterwards (a program may patch `math.fabs` to make every float check pass); the
# others, when the program imported them, are dropped from sys.modules so that tests import fresh,
# unpatched copies (the data sets' tests import math, random, copy and string).
TEST_MODULES = ("collections", "functools", "itertools", "math", "operator", "types")
FRESH_MODULES = ("copy", "random", "string")

JOB_FD = 3
EVENT_FD = 4

# Captured before untrusted code runs: built-in functions cannot be patched in place.
_write = os.write
_exit = os._exit
_type = type
_id = id
_len = len
_isinstance = isinstance
_str = str
_FunctionType = type(lambda: None)


def _read_job() -> dict:
    chunks = []
    while True:
        chunk = os.read(JOB_FD, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(JOB_FD)
    return marshal.loads(b"".join(chunks))


class Events:
    """Writes events to the supervisor. Only this object knows the token. Messages travel as hex, so
    a line is plain ASCII JSON without an encoder."""

    __slots__ = ("_token",)

    def __init__(self, token: str) -> None:
        self._token = token

    def send(self, kind: str, index: int = -1, verdict: str = "", message: str = "", extra: int = 0) -> None:
        hexed = message[:2000].encode("utf-8", "replace").hex()
        line = (f'{{"t":"{self._token}","e":"{kind}","i":{int(index)},"v":"{verdict}","m":"{hexed}",'
                f'"n":{int(extra)}}}\n').encode("ascii")
        view = memoryview(line)
        while view:
            try:
                written = _write(EVENT_FD, view)
            except OSError:
                _exit(70)
            view = view[written:]


def _describe(exc: BaseException) -> str:
    text = f"{_type(exc).__name__}: {exc}"
    return text if _len(text) <= 500 else text[:500] + "..."


# --- return-value guard ---------------------------------------------------------------------------
_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: classes made at run time (every `class` statement)
_IMMUTABLETYPE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE: C types whose attributes cannot be set
_SCALARS = _SEQUENCES = _MAPPINGS = _ITERATORS = frozenset()
_PATCHABLE: dict = {}


def _init_function_mode() -> None:
    """Import the test modules and fix the guard's type tables (before any untrusted code runs)."""
    global _SCALARS, _SEQUENCES, _MAPPINGS, _ITERATORS, _PATCHABLE
    for name in TEST_MODULES:
        __import__(name)
    import collections
    import itertools
    import types

    _SCALARS = frozenset({type(None), bool, int, float, complex, str, bytes, bytearray, range, type(Ellipsis)})
    _SEQUENCES = frozenset({list, tuple, set, frozenset, collections.deque,
                            type({}.keys()), type({}.values()), type({}.items())})
    _MAPPINGS = frozenset({dict, collections.OrderedDict, collections.defaultdict, collections.Counter})
    # Stdlib classes written in Python can be patched (`Counter.__eq__ = ...`): remember the originals.
    # Others from modules imported later (fractions.Fraction, ...) are rejected: they cannot be vouched for.
    _PATCHABLE = {t: (t.__eq__, t.__ne__, t.__hash__)
                  for t in (collections.OrderedDict, collections.defaultdict, collections.Counter)}
    _ITERATORS = frozenset({types.GeneratorType, map, filter, zip, enumerate, reversed, type(iter([])),
                            type(iter(())), type(iter(range(0))), type(iter(set())), type(iter({})),
                            type(iter(str())), itertools.chain, itertools.islice})


class GuardViolation(BaseException):
    """A function of the program returned something that is not a plain built-in value. A
    BaseException, so that a test's ``except Exception`` cannot swallow it."""


class ReturnGuard:
    """Checks values the program hands back to tests; records a violation once seen."""

    def __init__(self) -> None:
        self.violation = ""

    def plain(self, value, budget: int = 2_000_000) -> str:
        """'' when `value` is built from built-in types only, else the offending type's name."""
        stack = [value]
        seen = set()
        while stack:
            item = stack.pop()
            kind = _type(item)
            if kind in _SCALARS:
                continue
            if kind in _PATCHABLE and (kind.__eq__, kind.__ne__, kind.__hash__) != _PATCHABLE[kind]:
                return f"{kind.__name__} with a replaced __eq__"
            if kind in _SEQUENCES or kind in _MAPPINGS:
                if _id(item) in seen:
                    continue
                seen.add(_id(item))
                budget -= _len(item)
                if budget < 0:
                    return ""  # too large to inspect fully; what was seen is plain
                if kind in _MAPPINGS:
                    stack.extend(item.keys())
                    stack.extend(item.values())
                else:
                    stack.extend(item)
                continue
            if kind.__flags__ & _HEAPTYPE == 0 or kind.__flags__ & _IMMUTABLETYPE:
                # A type defined in C whose methods no program can replace (re.Match, Decimal,
                # datetime, memoryview, ...): compares by its own rules; not inspected further.
                continue
            return kind.__name__
        return ""

    def check(self, value, where: str):
        if _type(value) in _ITERATORS:
            return self._guarded_iter(value, where)
        bad = self.plain(value)
        if bad:
            self.violation = (f"{where} returned a value of type {bad!r}; only values built from built-in "
                              "types are accepted")
            raise GuardViolation(self.violation)
        return value

    def _guarded_iter(self, iterator, where):
        for item in iterator:
            yield self.check(item, where)

    def wrap(self, fn, where: str):
        import functools

        guard = self
        depth = [0]

        @functools.wraps(fn)
        def guarded(*args, **kwargs):
            depth[0] += 1
            try:
                result = fn(*args, **kwargs)
            finally:
                depth[0] -= 1
            # Recursive calls go through this wrapper too; only the outermost result reaches a test.
            return guard.check(result, where) if depth[0] == 0 else result

        return guarded


# --- function mode --------------------------------------------------------------------------------
class FunctionRun:
    def __init__(self, job: dict, events: Events) -> None:
        self.job = job
        self.events = events
        self.guard = ReturnGuard()
        self.current = -1
        self.reported: set[int] = set()

    def verdict_of(self, exc: BaseException | None) -> tuple[str, str]:
        if self.guard.violation:
            message, self.guard.violation = self.guard.violation, ""
            return "wrong_answer", message
        if exc is None:
            return "passed", ""
        if _isinstance(exc, AssertionError):
            text = _str(exc)
            return "wrong_answer", ("assertion failed: " + text) if text else "assertion failed"
        if _isinstance(exc, MemoryError):
            return "memory_limit", "MemoryError"
        return "runtime_error", _describe(exc)

    def hook(self, index: int, what: str, exc: BaseException | None) -> None:
        if what == "start":
            self.current = index
            self.events.send("start", index)
            return
        verdict, message = self.verdict_of(exc if what == "error" else None)
        self.events.send("end", index, verdict, message)
        self.reported.add(index)
        self.current = -1

    def fail_remaining(self, total: int, verdict: str, message: str) -> None:
        for index in range(total):
            if index not in self.reported:
                self.events.send("end", index, verdict, message)
                self.reported.add(index)


_RESTORED_MODULES = ("builtins",) + TEST_MODULES


def _snapshot_modules() -> dict:
    return {name: dict(vars(sys.modules[name])) for name in _RESTORED_MODULES if name in sys.modules}


def _restore(snapshot: dict, real_builtins) -> None:
    """Undo what the program may have done to the modules tests use."""
    for name in FRESH_MODULES:
        if name not in snapshot:
            sys.modules.pop(name, None)
    threading = sys.modules.get("threading")
    if threading is not None:
        threading.settrace(None)
        threading.setprofile(None)
    module_type = _type(sys)
    for name, saved in snapshot.items():
        module = sys.modules.get(name)
        if module is None:
            continue
        namespace = vars(module)
        for key in [k for k in namespace if k not in saved]:
            if _type(namespace[key]) is not module_type:  # submodules imported since (collections.abc) stay
                del namespace[key]
        namespace.update(saved)
    sys.modules["builtins"] = real_builtins


def _os_threads() -> int:
    try:
        return _len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def run_function(job: dict, events: Events) -> None:
    run = FunctionRun(job, events)
    total = job["total"]
    events.send("plan", extra=total)
    snapshot = _snapshot_modules()
    namespace: dict = {"__name__": "solution", "__builtins__": builtins}
    try:
        exec(job["prelude"], namespace)
    except BaseException as exc:
        events.send("harness_error", message=f"the prelude failed: {_describe(exc)}")
        return
    try:
        program = compile(job.pop("program"), "<program>", "exec")
    except (SyntaxError, ValueError) as exc:
        run.fail_remaining(total, "runtime_error", f"the program does not compile: {_describe(exc)}")
        events.send("done")
        return
    try:
        _load_and_test(run, program, namespace, snapshot)
    except BaseException as exc:
        # Something the program left behind (a trace hook, a patched object) broke this file's own
        # code: that is the program's failure, never a pass.
        sys.settrace(None)
        sys.setprofile(None)
        run.fail_remaining(total, "runtime_error", f"the program interfered with the test harness: {_describe(exc)}")
    events.send("done")


def _load_and_test(run: FunctionRun, program, namespace: dict, snapshot: dict) -> None:
    job, events, total = run.job, run.events, run.job["total"]
    real_builtins = builtins
    try:
        exec(program, namespace)
        loaded = None
    except BaseException as exc:  # SystemExit and KeyboardInterrupt included: they are failures here
        loaded = exc
    sys.settrace(None)  # C calls: no Python-level hook runs between the program and these
    sys.setprofile(None)
    _restore(snapshot, real_builtins)
    if loaded is not None:
        verdict = "memory_limit" if _isinstance(loaded, MemoryError) else "runtime_error"
        run.fail_remaining(total, verdict, f"the program raised {_describe(loaded)} before the tests ran")
        return
    threads = _os_threads()
    if threads > 1:
        run.fail_remaining(total, "runtime_error",
                           f"the program left {threads - 1} thread(s) running after it was loaded")
        return

    namespace["__builtins__"] = real_builtins
    # Every function the program defined hands its results to tests through the guard.
    for name, value in list(namespace.items()):
        if _type(value) is _FunctionType and value.__code__.co_filename == "<program>":
            namespace[name] = run.guard.wrap(value, f"{name}()")
    namespace[job["hook"]] = run.hook
    try:
        exec(job["setup"], namespace)
    except BaseException as exc:
        run.fail_remaining(total, "runtime_error", f"the test setup failed: {_describe(exc)}")
        return

    if job["candidate"] is not None:
        try:
            exec(job["tests"][0], namespace)
            candidate = eval(job["candidate"], namespace)
            if not callable(candidate):
                raise TypeError(f"the candidate {job['candidate_text']!r} is not callable")
            candidate = run.guard.wrap(candidate, "the candidate")
            namespace["check"](candidate)
            failure = None
        except BaseException as exc:
            failure = exc
        if failure is not None:
            verdict, message = run.verdict_of(failure)
            if run.current >= 0:
                events.send("end", run.current, verdict, message)
                run.reported.add(run.current)
            run.fail_remaining(total, verdict, f"not reached: check() stopped with {message}")
    else:
        for index, code in enumerate(job["tests"]):
            run.hook(index, "start", None)
            try:
                exec(code, namespace)
                run.hook(index, "ok", None)
            except BaseException as exc:
                run.hook(index, "error", exc)
    run.fail_remaining(total, "runtime_error", "not reached")


# --- stdio mode -----------------------------------------------------------------------------------
def run_stdio(job: dict, events: Events) -> None:
    try:
        program = compile(job.pop("program"), "<program>", "exec")
    except (SyntaxError, ValueError) as exc:
        events.send("compile_error", message=_describe(exc))
        _exit(1)
    sys.argv = ["main.py"]
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    del job
    try:
        exec(program, namespace)
    except MemoryError:
        events.send("memory")
        _exit(1)


def main() -> None:
    mode = sys.argv[1]
    job = _read_job()
    events = Events(job.pop("token"))
    if mode == "function":
        sys.stdin = open(os.devnull)
        _init_function_mode()
        try:
            run_function(job, events)
        except BaseException as exc:  # a failure of this file, not of the program
            events.send("harness_error", message=f"runner failed: {_describe(exc)}")
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:
            pass
        _exit(0)
    elif mode == "stdio":
        run_stdio(job, events)
    else:
        events.send("harness_error", message=f"unknown mode {mode!r}")
        _exit(2)


if __name__ == "__main__":
    main()
