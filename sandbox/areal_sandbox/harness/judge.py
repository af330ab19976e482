"""The tests' process: runs a data set's test code against the program without running the program.

The trust boundary (function mode). Three processes per run, all in the container:
  supervisor (PID 1)  trusted; judges from the events this process sends, on a pipe only it reads;
  this process        trusted; forked from the supervisor (no exec), so it is not dumpable from its
                      first instruction: the program cannot ptrace it, read or write its memory
                      (/proc/PID/mem, process_vm_writev) or open its file descriptors (/proc/PID/fd).
                      It never executes the program's code: it runs the prelude, the setup and the
                      tests, with the candidate and every program function the tests name replaced
                      by a proxy (`ProgramFunction`);
  the program         untrusted; a fresh interpreter (runner.py, function mode) serving calls.
A proxy sends the arguments as data and reads the reply as data (`wire.py`): built-in values only,
parsed without executing anything; exceptions by class name and arguments. The asserts, the
comparisons and the verdicts are computed here, with this process's own built-ins and modules,
which the program never touches. So a program can fail its tests in any way it likes, but the only
way to pass one is to send back the values the test accepts.

What the program can still do to this process from outside: kill or stop it (signals from the same
user), or starve it of CPU. Both end the run without the ``done`` event, and the supervisor fails
every test that was not reported: failed closed, never a pass.

An object of the program that is not data (a ``re.Match``, an object of the program's own class,
constructed by a test or returned) stays in the program's process; the tests get a stand-in
(`ProgramObject`). Tests that hand the program something of their own that is not data (a lambda,
an object of a class the tests define) cannot be run this way: such a test gets the verdict
``unsupported``, with the reason; the counts per data set are in sandbox/README.md.
"""
from __future__ import annotations

import builtins
import importlib
import json
import marshal
import os

import wire

_REQUEST_VERSION = 4


class ProgramGone(BaseException):
    """The program's replies stopped (it exited, was killed, or broke the protocol). A
    BaseException, so that a test's ``except Exception`` cannot swallow it."""


class CannotCross(BaseException):
    """The test hands the program something that cannot cross as data."""


class NotDataReturned(BaseException):
    """The program returned something that cannot cross as data (an object of its own class)."""


class ProgramAborted(BaseException):
    """The program raised SystemExit, KeyboardInterrupt or GeneratorExit from a call."""


_EXCEPTIONS = {name: value for name, value in vars(builtins).items()
               if isinstance(value, type) and issubclass(value, Exception)}


class Channel:
    """The pipes to the program's process; one request and one reply at a time."""

    def __init__(self, request_fd: int, reply_fd: int, run: "Judge") -> None:
        self.request_fd = request_fd
        self.reply_fd = reply_fd
        self.run = run
        self.seq = 0

    def send(self, message: tuple) -> None:
        self._send_body(marshal.dumps(message, _REQUEST_VERSION))

    def _send_body(self, body: bytes) -> None:
        if not _write_all(self.request_fd, wire.frame(body)):
            self.run.gone("the program stopped reading its calls")

    def _read_exact(self, size: int) -> bytes:
        chunks = []
        while size:
            try:
                chunk = os.read(self.reply_fd, min(size, 1 << 20))
            except OSError:
                chunk = b""
            if not chunk:
                self.run.gone("the program's process ended")
            chunks.append(chunk)
            size -= len(chunk)
        return b"".join(chunks)

    def receive(self):
        size = int.from_bytes(self._read_exact(4), "big")
        if size > wire.MAX_FRAME:
            self.run.gone(f"the program sent a reply of {size} bytes (the limit is {wire.MAX_FRAME})")
        try:
            return wire.strict_loads(self._read_exact(size))
        except wire.NotData as exc:
            self.run.gone(f"the program sent a reply that is not data: {exc}")

    def _reply(self) -> tuple:
        reply = self.receive()
        if type(reply) is not tuple or len(reply) < 2 or reply[1] != self.seq or type(reply[0]) is not str:
            self.run.gone("the program sent a reply out of turn")
        return reply

    def request(self, kind: str, *fields) -> tuple:
        """One request that is not a call; returns (status, the rest of the reply)."""
        self.seq += 1
        self.send((kind, self.seq) + fields)
        reply = self._reply()
        return reply[0], reply[2:]

    def call(self, target: str, args: tuple, kwargs: dict):
        try:
            body = wire.pack(("call", self.seq + 1, target), (args, kwargs), ref_of=self.run.reference_of,
                             version=_REQUEST_VERSION)
        except (wire.NotData, ValueError) as exc:
            self.run.unsupported(f"the test passes {exc} to the program, which cannot cross the process "
                                 "boundary as data")
        self.seq += 1
        self._send_body(body)
        return self.run.outcome(self._reply(), args, kwargs)


class ProgramFunction:
    """Stands for a function of the program in the tests' namespace: calls cross as data."""

    __slots__ = ("_channel", "_target", "__name__")

    def __init__(self, channel: Channel, target: str, name: str) -> None:
        self._channel = channel
        self._target = target
        self.__name__ = name

    def __call__(self, *args, **kwargs):
        return self._channel.call(self._target, args, kwargs)

    def __repr__(self) -> str:
        return f"<program function {self.__name__}>"


class ProgramObject:
    """Stands for an object of the program that is not data (a ``re.Match``, an object of the
    program's own class): it stays in the program's process. Here it has the type name, the repr
    and the truth value the program gave it, and equals only itself, so it can satisfy a test
    exactly as far as returning ``True`` or ``False`` could; passed back to the program, the program
    gets its object."""

    __slots__ = ("handle", "type_name", "text", "truth")

    def __init__(self, handle: int, type_name: str, text: str, truth: bool) -> None:
        self.handle = handle
        self.type_name = type_name
        self.text = text
        self.truth = truth

    def __bool__(self) -> bool:
        return self.truth

    def __repr__(self) -> str:
        return f"<{self.type_name} object of the program: {self.text}>"


def _apply_in_place(original, new) -> None:
    """What a call did to a mutable argument, done to the test's own object (same type only)."""
    kind = type(original)
    if kind is bytearray and type(new) is bytes:
        original[:] = new
        return
    if kind is not type(new):
        return
    if isinstance(original, list):
        original[:] = new
    elif isinstance(original, (dict, set)):
        original.clear()
        original.update(new)
    elif type(original).__name__ == "deque":
        original.clear()
        original.extend(new)


class Judge:
    """One function-mode run: the tests, their verdicts, and what the program's replies did."""

    def __init__(self, job: dict, request_fd: int, reply_fd: int, event_fd: int) -> None:
        self.job = job
        self.event_fd = event_fd
        self.channel = Channel(request_fd, reply_fd, self)
        self.proxies: dict[int, str] = {}
        self.flag: tuple[str, str] | None = None  # (verdict, message) that overrides the test's outcome
        self.current = -1
        self.reported: set[int] = set()
        self.wanted: list[str] = []
        self.stand_ins = 0  # objects of the program the tests got stand-ins for (reported with `done`)
        self.objects: dict[int, ProgramObject] = {}
        self.loaded = False

    # -- events for the supervisor --------------------------------------------------------------
    def send(self, kind: str, index: int = -1, verdict: str = "", message: str = "", count: int = 0) -> None:
        line = json.dumps({"e": kind, "i": index, "v": verdict, "m": _safe_text(message, 2000), "n": count}) + "\n"
        if not _write_all(self.event_fd, line.encode()):
            os._exit(70)  # the supervisor is gone: nothing left to report to

    # -- what crosses -----------------------------------------------------------------------------
    def reference_of(self, value):
        if type(value) is ProgramFunction and id(value) in self.proxies:
            return ("ref", self.proxies[id(value)])
        if type(value) is ProgramObject:
            return ("obj", value.handle)
        return None

    def stand_in(self, head: str, rest: tuple) -> ProgramObject:
        shape = tuple(type(item) for item in rest)
        if head != "ob" or shape != (int, str, str, bool):
            raise wire.NotData(f"a {head!r} record in a reply")
        known = self.objects.get(rest[0])
        if known is not None:
            known.truth = rest[3]  # the object may have changed; its identity has not
            return known
        self.stand_ins += 1
        made = self.objects[rest[0]] = ProgramObject(*rest)
        return made

    def gone(self, message: str):
        self.flag = ("gone", message)
        raise ProgramGone(message)

    def unsupported(self, message: str):
        if self.flag is None:
            self.flag = ("unsupported", message)
        raise CannotCross(message)

    def outcome(self, reply: tuple, args: tuple, kwargs: dict):
        status, rest = reply[0], reply[2:]
        try:
            if status == "ok" and len(rest) == 2:
                result, changed = wire.unpack_value(rest[0], rest[1], self.stand_in)
                self._copy_back(changed, args, kwargs)
                return result
            if status == "raise" and len(rest) == 5:
                name, base, text = (_safe_text(item, 200) for item in rest[:3])
                exc_args, changed = wire.unpack_value(rest[3], rest[4], self.stand_in)
                self._copy_back(changed, args, kwargs)
                raised = self._exception(name, base, text, exc_args)
            elif status == "nodata" and len(rest) == 1:
                message = f"the program returned {_safe_text(rest[0])}, which cannot cross the process boundary"
                if self.flag is None:
                    self.flag = ("wrong_answer", message)
                raised = NotDataReturned(message)
            else:
                raised = None
        except Exception as exc:  # whatever the reply made the decoding or the copying-back raise
            self.gone(f"the program sent a reply that is not data: {_describe(exc)}")
        if raised is None:
            self.gone("the program sent a reply of an unknown shape")
        raise raised

    def _copy_back(self, changed, args: tuple, kwargs: dict) -> None:
        if type(changed) is not dict:
            raise wire.NotData("the changed arguments are not a mapping")
        for key, value in changed.items():
            if type(key) is int and 0 <= key < len(args):
                _apply_in_place(args[key], value)
            elif type(key) is str and key in kwargs:
                _apply_in_place(kwargs[key], value)

    @staticmethod
    def _exception(name: str, base: str, text: str, exc_args) -> BaseException:
        """The program's exception as one the tests can catch: its nearest built-in base class (a
        class of the program's own becomes a subclass of that base made here, with its name)."""
        kind = _EXCEPTIONS.get(base)
        if kind is None:
            return ProgramAborted(f"the program raised {text}")
        if issubclass(kind, (StopIteration, StopAsyncIteration)):
            # Raised here it would end the test's loop over map()/filter() early, and all() would
            # pass: as in a generator (PEP 479), it becomes a RuntimeError.
            return RuntimeError(f"the program raised {text}")
        if name != base:
            kind = type(name[:100] if name.isidentifier() else "ProgramError", (kind,), {"__module__": "program"})
        if type(exc_args) is not tuple:
            exc_args = (text,)
        for attempt in (exc_args, (text,)):
            try:
                return kind(*attempt)
            except Exception:
                continue
        return Exception(text)

    # -- verdicts ---------------------------------------------------------------------------------
    def verdict_of(self, exc: BaseException | None) -> tuple[str, str]:
        if self.flag is not None:
            verdict, message = self.flag
            if verdict == "gone":
                raise ProgramGone(message)
            self.flag = None
            return verdict, message
        if exc is None:
            return "passed", ""
        if isinstance(exc, AssertionError):
            text = _describe(exc).partition(": ")[2]
            return "wrong_answer", ("assertion failed: " + text) if text else "assertion failed"
        if isinstance(exc, MemoryError):
            return "memory_limit", "MemoryError"
        return "runtime_error", _describe(exc)

    def hook(self, index: int, what: str, exc: BaseException | None) -> None:
        if what == "start":
            self.current = index
            self.send("start", index)
            return
        if isinstance(exc, ProgramGone):
            raise exc
        verdict, message = self.verdict_of(exc if what == "error" else None)
        self.send("end", index, verdict, message)
        self.reported.add(index)
        self.current = -1

    def fail_remaining(self, verdict: str, message: str) -> None:
        for index in range(self.job["total"]):
            if index not in self.reported:
                self.send("end", index, verdict, message)
                self.reported.add(index)

    # -- the run ------------------------------------------------------------------------------------
    def run(self) -> None:
        job = self.job
        namespace: dict = {"__name__": "tests", "__builtins__": builtins}
        try:
            exec(job["prelude"], namespace)
            exec(job["setup"], namespace)
        except BaseException as exc:
            self.send("harness_error", message=f"the test setup failed: {_describe(exc)}")
            return
        # A name the tests read and do not define is the program's; a built-in's name only where
        # the task says the program defines it (MBPP's task 126 tests a function called `sum`), so
        # that `sorted`, `abs` or `set` in a test always mean the built-ins.
        self.wanted = [name for name in job["names"] if name not in namespace
                       and (not hasattr(builtins, name) or name in (job["program_names"] or ()))]
        self.channel.send(("load", 0, {"prelude": job["prelude"], "setup": job["setup"], "program": job["program"],
                                       "candidate": job["candidate"], "candidate_text": job["candidate_text"],
                                       "names": self.wanted}))
        loaded = self.channel.receive()
        if type(loaded) is not tuple or not loaded or loaded[0] != "loaded" or len(loaded) != 2:
            self._load_failed(loaded)
            return
        self._install(namespace, loaded[1])
        self.loaded = True
        try:
            if job["candidate"] is not None:
                self._run_check(namespace)
            else:
                self._run_statements(namespace)
        except ProgramGone as exc:
            self.send("gone", self.current, message=str(exc))
            return
        self.fail_remaining("runtime_error", "not reached")
        self.send("done", count=self.stand_ins)

    def _load_failed(self, loaded) -> None:
        stage, text = (loaded[1], _safe_text(loaded[2])) if (type(loaded) is tuple and len(loaded) == 3
                                                              and loaded[0] == "load_error") else ("", "")
        if stage not in ("compile", "memory", "candidate", "program", "prelude", "setup"):
            stage = ""
        if stage == "compile":
            self.fail_remaining("runtime_error", f"the program does not compile: {text}")
        elif stage == "memory":
            self.fail_remaining("memory_limit", "the program raised MemoryError before the tests ran")
        elif stage == "candidate":
            self.fail_remaining("runtime_error", f"not reached: the candidate failed: {text}")
        elif stage:
            self.fail_remaining("runtime_error", f"the program raised {text} before the tests ran"
                                if stage == "program" else f"the {stage} failed after the program ran: {text}")
        else:
            self.send("gone", message="the program's process did not load the program")
            return
        self.send("done")

    def _install(self, namespace: dict, kinds) -> None:
        """Proxies for the program's functions the tests may call: the task's `program_names`
        (all unbound names when it gives none); the genuine module for a module name the tests
        use without importing it (MBPP's task 596 relies on the program's ``import sys``). Nothing
        else: a helper the tests expect from the task (``is_same_list``) is never the program's,
        and neither is a constant; a test reading one fails with a NameError."""
        if type(kinds) is not dict:
            self.gone("the program sent a reply of an unknown shape")
        allowed = self.job["program_names"]
        for name, kind in kinds.items():
            if type(name) is not str or name not in self.wanted or type(kind) is not tuple or not kind:
                continue
            if kind == ("function",) and (allowed is None or name in allowed):
                proxy = ProgramFunction(self.channel, name, name)
                self.proxies[id(proxy)] = name
                namespace[name] = proxy
            elif kind == ("module", name):
                try:
                    namespace[name] = importlib.import_module(name)
                except Exception:
                    pass

    def _run_check(self, namespace: dict) -> None:
        candidate = ProgramFunction(self.channel, "", self.job["candidate_text"] or "candidate")
        self.proxies[id(candidate)] = ""
        namespace[self.job["hook"]] = self.hook
        try:
            exec(self.job["tests"][0], namespace)
            namespace["check"](candidate)
            failure = None
        except ProgramGone:
            raise
        except BaseException as exc:
            failure = exc
        if failure is not None:
            verdict, message = self.verdict_of(failure)
            if verdict == "passed":  # a stand-in flag consumed elsewhere; still a failure here
                verdict, message = "runtime_error", _describe(failure)
            if self.current >= 0:
                self.send("end", self.current, verdict, message)
                self.reported.add(self.current)
            else:
                # A statement of check() that is not one of its tests failed (``if ...: raise``,
                # a helper's assert): a check of the task failed, so no test of this run passes.
                self.send("void", verdict=verdict, message=f"check() failed outside its tests: {message}")
            self.fail_remaining(verdict, f"not reached: check() stopped with {message}")

    def _run_statements(self, namespace: dict) -> None:
        for index, code in enumerate(self.job["tests"]):
            self.hook(index, "start", None)
            try:
                exec(code, namespace)
            except ProgramGone:
                raise
            except BaseException as exc:
                self.hook(index, "error", exc)
            else:
                self.hook(index, "ok", None)


def _write_all(fd: int, data: bytes) -> bool:
    """Write all of `data` to `fd`; False when the other end is gone."""
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except OSError:
            return False
        view = view[written:]
    return True


def _safe_text(value, limit: int = 500) -> str:
    """Text for a message, from anything the program's data can hold; never raises. Lone
    surrogates are escaped (the verdicts end up in UTF-8 files), long text is cut."""
    try:
        text = value if type(value) is str else repr(value)
    except Exception:  # an int past the digit limit of int-to-str conversion
        text = f"<a {type(value).__name__} too large to show>"
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text if len(text) <= limit else text[:limit] + "..."


def _describe(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:
        text = _safe_text(exc.args)
    return _safe_text(f"{type(exc).__name__}: {text}")


def main(job: dict, request_fd: int, reply_fd: int, event_fd: int) -> None:
    judge = Judge(job, request_fd, reply_fd, event_fd)
    try:
        judge.run()
    except ProgramGone as exc:
        judge.send("gone", judge.current, message=str(exc))
    except BaseException as exc:
        if judge.loaded:  # after the program loaded, only what it sent can get here: its failure
            judge.send("gone", judge.current, message=f"the tests could not use what the program sent "
                                                       f"({_describe(exc)})")
        else:  # a failure of this file or of the task's own code, not of the program
            judge.send("harness_error", message=f"the tests' process failed: {_describe(exc)}")
