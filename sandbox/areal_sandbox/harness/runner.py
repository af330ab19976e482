"""The program's own process: runs one untrusted program in a fresh interpreter.

Started by the supervisor (``python -I -B -c "import runner; runner.main()" MODE``). It imports as
little as it can: interpreter start-up is most of the cost of an execution.

Modes:
  stdio     fd 3: the job (``marshal``, read once and closed before untrusted code runs); fd 4:
            events (compile errors, MemoryError), one JSON line each with the job's token. The
            program runs as ``__main__`` reading stdin; the supervisor judges its stdout.
  function  a server of calls. fd 3: requests from the tests' process (``judge.py``), fd 4: the
            replies. The first request loads the program (prelude, program, setup, the candidate
            expression); each next one calls a function of the program with arguments that crossed
            as data, and the reply carries the return value (or the exception, by type name and
            arguments) back as data, with the arguments the call changed in place (`wire.py`).

Nothing in this process decides a verdict. The asserts, the comparisons and the verdicts live in
the tests' process, which never executes the program's code; whatever this process sends is parsed
there as data only. So anything the program does here (patching this file, the builtins or the
reply encoder, walking frames, exiting early, forging replies) can only make its own calls fail.
"""
from __future__ import annotations

import builtins
import marshal
import os
import sys

JOB_FD = 3
EVENT_FD = 4
REQUEST_FD = 3
REPLY_FD = 4

# Captured before untrusted code runs, so that the server loop keeps working for an honest program
# that happens to shadow a name; a program that breaks them only breaks its own replies.
_write = os.write
_read = os.read
_exit = os._exit
_type = type


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
    """Stdio mode's events for the supervisor (they can only make the program's own run fail)."""

    __slots__ = ("_token",)

    def __init__(self, token: str) -> None:
        self._token = token

    def send(self, kind: str, message: str = "") -> None:
        hexed = message[:2000].encode("utf-8", "replace").hex()
        line = f'{{"t":"{self._token}","e":"{kind}","m":"{hexed}"}}\n'.encode("ascii")
        _write_all(EVENT_FD, line)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            written = _write(fd, view)
        except OSError:
            _exit(70)
        view = view[written:]


def _describe(exc: BaseException) -> str:
    text = f"{_type(exc).__name__}: {exc}"
    return text if len(text) <= 500 else text[:500] + "..."


# --- function mode: a server of calls -------------------------------------------------------------
def _read_exact(size: int) -> bytes | None:
    chunks = []
    while size:
        chunk = _read(REQUEST_FD, min(size, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _next_request():
    header = _read_exact(4)
    if header is None:
        return None
    body = _read_exact(int.from_bytes(header, "big"))
    return None if body is None else marshal.loads(body)


def _reply(body: bytes) -> None:
    _write_all(REPLY_FD, len(body).to_bytes(4, "big") + body)


def _exception_names(exc: BaseException) -> tuple[str, str]:
    """(the exception's own class name, its nearest built-in base class name)."""
    kind = _type(exc)
    base = next((k for k in kind.__mro__ if k.__module__ == "builtins"), BaseException)
    return kind.__qualname__, base.__name__


_MUTABLE = (list, dict, set, bytearray)


def _snapshot(value):
    try:
        return marshal.dumps(value, 2)
    except ValueError:
        import wire

        try:
            return marshal.dumps(wire.tag(value), 2)
        except (ValueError, wire.NotData):
            return None


class CallServer:
    def __init__(self, job: dict) -> None:
        self.job = job
        self.namespace: dict = {"__name__": "solution", "__builtins__": builtins}
        self.candidate = None
        self.handles: list = []  # objects that are not data, kept here; the tests get stand-ins
        self.handle_of: dict[int, int] = {}

    def load(self) -> tuple:
        """Run the prelude, the program and the setup; the reply to the first request."""
        job, namespace = self.job, self.namespace
        try:
            exec(job["prelude"], namespace)
        except BaseException as exc:
            return ("load_error", "prelude", _describe(exc))
        try:
            program = compile(job.pop("program"), "<program>", "exec")
        except (SyntaxError, ValueError) as exc:
            return ("load_error", "compile", _describe(exc))
        try:
            exec(program, namespace)
        except MemoryError:
            return ("load_error", "memory", "MemoryError")
        except BaseException as exc:  # SystemExit and KeyboardInterrupt included: failures here
            return ("load_error", "program", _describe(exc))
        try:
            exec(job["setup"], namespace)
        except BaseException as exc:
            return ("load_error", "setup", _describe(exc))
        if job["candidate"] is not None:
            try:
                self.candidate = eval(job["candidate"], namespace)
                if not callable(self.candidate):
                    raise TypeError(f"the candidate {job['candidate_text']!r} is not callable")
            except BaseException as exc:
                return ("load_error", "candidate", _describe(exc))
        kinds = {}
        for name in job["names"]:
            if name in namespace:
                value = namespace[name]
                if _type(value) is _type(sys):
                    kinds[name] = ("module", str(getattr(value, "__name__", "")))
                elif callable(value):
                    kinds[name] = ("function",)
        return ("loaded", kinds)

    def _resolve(self, head: str, rest: tuple):
        if head == "ref":
            return self.candidate if rest[0] == "" else self.namespace[rest[0]]
        return self.handles[rest[0]]

    def _opaque(self, value, type_name: str) -> tuple:
        try:
            text = repr(value)[:200]
        except BaseException:
            text = ""
        try:
            truth = bool(value)
        except BaseException:
            truth = True
        handle = self.handle_of.get(id(value))
        if handle is None:  # the same object always gets the same handle (the tests see `is` hold)
            handle = self.handle_of[id(value)] = len(self.handles)
            self.handles.append(value)  # kept alive, so that its id is never reused
        return ("ob", handle, type_name, str(text), truth is True)

    def serve(self) -> None:
        import wire

        while True:
            request = _next_request()
            if request is None:
                return
            _, seq, target, mode, payload = request
            args, kwargs = wire.unpack_value(mode, payload, self._resolve)
            function = self.candidate if target == "" else self.namespace[target]
            _reply(self.call(seq, function, args, kwargs))

    def call(self, seq: int, function, args: tuple, kwargs: dict) -> bytes:
        watched = {key: value for key, value in list(enumerate(args)) + list(kwargs.items())
                   if isinstance(value, _MUTABLE) or _type(value).__name__ == "deque"}
        before = {key: _snapshot(value) for key, value in watched.items()}
        try:
            result = function(*args, **kwargs)
        except BaseException as exc:
            name, base = _exception_names(exc)
            changed = self._changed(watched, before)
            head = ("raise", seq, name, base, _describe(exc))
            try:
                return self._pack(head, (tuple(exc.args), changed))
            except BaseException:
                return self._pack(head, ((), changed))
        changed = self._changed(watched, before)
        try:
            return self._pack(("ok", seq), (result, changed))
        except BaseException as exc:
            return marshal.dumps(("nodata", seq, str(exc)[:500]), 2)

    @staticmethod
    def _changed(watched: dict, before: dict) -> dict:
        return {key: value for key, value in watched.items() if _snapshot(value) != before[key]}

    def _pack(self, head: tuple, value) -> bytes:
        import wire

        return wire.pack(head, value, opaque=self._opaque)


def run_function() -> None:
    request = _next_request()
    if request is None:
        return
    server = CallServer(request[2])
    loaded = server.load()
    _reply(marshal.dumps(loaded, 2))
    if loaded[0] == "loaded":
        server.serve()


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
    if mode == "function":
        sys.stdin = open(os.devnull)
        try:
            run_function()
        except BaseException:
            pass  # the tests' process sees the replies stop and judges that
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:
            pass
        _exit(0)
    job = _read_job()
    events = Events(job.pop("token"))
    if mode == "stdio":
        run_stdio(job, events)
    else:
        events.send("harness_error", message=f"unknown mode {mode!r}")
        _exit(2)


if __name__ == "__main__":
    main()
