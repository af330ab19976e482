"""The sandbox container's PID 1: runs jobs in fresh child processes, judges them, cleans up.

Protocol (stdin/stdout of the container, attached by the host):
  -> on start, one line ``{"ready": true, "harness": HASH, ...}``
  <- one job per line (JSON, see `run_job`), -> one result per line (JSON)
  EOF on stdin (the host went away: Docker closes a container's stdin when its attached client
  disconnects) or ``--idle-exit`` seconds without a job: exit, and Docker removes the container.
  ``--once``: run one job and exit (the one-``docker run``-per-execution backend).

Why this is safe against the program it runs (same unprivileged user as this process):
  - PID 1 of a PID namespace receives no signal from inside it unless it installed a handler, and
    this process installs none (SIGINT is reset to the default), so the program cannot kill it;
  - it is not dumpable (prctl), so the program cannot ptrace it or open /proc/1/fd or /proc/1/mem
    to write a forged result on the container's stdout;
  - after each child run, ``kill(-1, SIGKILL)`` from here kills every other process in the container
    (setsid and daemonised children included), they are reaped, and the work directories are wiped;
  - anything left behind (a process that would not die, files that would not go, SysV IPC objects)
    marks the container as harmed: the result says so and the host replaces the container.
"""
from __future__ import annotations

import errno
import json
import os
import resource
import select
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import compare  # noqa: E402  (the harness directory, not an installed package)
import prepare  # noqa: E402

# The runner is imported as a module, so that its compiled form in the image is used.
RUNNER_BOOT = f"import sys; sys.path.insert(0, {HERE!r}); import runner; runner.main()"
WORK_DIRS = ("/work", "/tmp", "/dev/shm", "/dev/mqueue")
CHILD_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/work",
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "PYTHONIOENCODING": "utf-8",
}
if os.environ.get("LD_LIBRARY_PATH"):  # the offline image keeps libpython beside the interpreter
    CHILD_ENV["LD_LIBRARY_PATH"] = os.environ["LD_LIBRARY_PATH"]
STDERR_KEEP = 8192
VERDICTS = ("passed", "wrong_answer", "runtime_error", "timeout", "memory_limit", "output_limit", "skipped")


def _set_undumpable() -> bool:
    """PR_SET_DUMPABLE = 0; True when it took effect (the host refuses a supervisor without it)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(4, 0, 0, 0, 0)
        return libc.prctl(3, 0, 0, 0, 0) == 0  # PR_GET_DUMPABLE
    except Exception as exc:
        sys.stderr.write(f"supervisor: prctl(PR_SET_DUMPABLE) unavailable: {exc}\n")
        return False


def _oom_kills() -> int:
    """The container's OOM-kill counter (cgroup v2 memory.events or v1 memory.oom_control)."""
    for path in ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"):
        try:
            with open(path) as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            continue
    return -1


class Child:
    """One run of runner.py with pipes for stdin, stdout, stderr, the job (fd 3) and events (fd 4)."""

    def __init__(self, mode: str, payload: bytes, limits: dict, stdin_data: bytes) -> None:
        self.limits = limits
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        job_r, job_w = os.pipe()
        ev_r, ev_w = os.pipe()
        memory = int(limits["memory_mb"]) * 1024 * 1024
        cpu = int(limits["timeout_s"]) + 2
        fsize = int(limits["file_size_mb"]) * 1024 * 1024
        self.pid = os.fork()
        if self.pid == 0:  # child: never return into the supervisor's code
            try:
                os.setsid()
                try:
                    with open("/proc/self/oom_score_adj", "w") as f:
                        f.write("1000")  # the OOM killer takes the program, never PID 1
                except OSError:
                    pass
                resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
                resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
                resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
                resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
                resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
                for target, fd in ((0, in_r), (1, out_w), (2, err_w), (3, job_r), (4, ev_w)):
                    os.dup2(fd, target)
                os.closerange(5, 65536)
                for fd in (3, 4):
                    os.set_inheritable(fd, True)
                os.chdir("/work")
                os.execve(sys.executable, [sys.executable, "-I", "-B", "-c", RUNNER_BOOT, mode], CHILD_ENV)
            except BaseException:
                pass
            os._exit(127)
        for fd in (in_r, out_w, err_w, job_r, ev_w):
            os.close(fd)
        try:  # readable when the child exits, so select() wakes at once
            self.pidfd: int | None = os.pidfd_open(self.pid)
        except (AttributeError, OSError):
            self.pidfd = None
        self.fds = {"stdin": in_w, "stdout": out_r, "stderr": err_r, "job": job_w, "events": ev_r}
        self.pending = {in_w: memoryview(stdin_data), job_w: memoryview(payload)}
        if not stdin_data:
            os.close(in_w)
            del self.pending[in_w]
        for fd in self.pending:
            os.set_blocking(fd, False)
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.stderr_total = 0
        self.events_buf = bytearray()
        self.output_total = 0
        self.status: int | None = None
        self.killed_for = ""  # "timeout" | "output_limit"

    def run(self, deadline: float, reaped: dict) -> None:
        """Feed input, collect output and events until the child exits and its pipes close, or the
        deadline passes, or the output cap is exceeded (then everything is killed)."""
        readers = {self.fds["stdout"], self.fds["stderr"], self.fds["events"]}
        cap = int(self.limits["output_bytes"])
        exited_at = None
        while True:
            if self.status is None:
                self.status = reaped.pop(self.pid, None)
                if self.status is None:
                    try:
                        pid, status = os.waitpid(self.pid, os.WNOHANG)
                    except ChildProcessError:
                        pid, status = self.pid, 0
                    if pid:
                        self.status = status
            if self.status is not None and exited_at is None:
                exited_at = time.monotonic()
                # The program is done: whatever it left running goes now, so the pipes reach EOF.
                kill_all(reaped)
            now = time.monotonic()
            if not readers and not self.pending:
                if self.status is not None:
                    return
            if self.status is None and now >= deadline:
                self.killed_for = "timeout"
                kill_all(reaped)
                continue
            if exited_at is not None and now - exited_at > 2.0:
                return  # pipes held open by something that survived kill_all: reported as harm
            writers = [fd for fd in self.pending]
            watch = list(readers)
            if self.status is None and self.pidfd is not None:
                watch.append(self.pidfd)
                poll = 0.5
            else:
                poll = 0.01 if self.status is None else 0.05
            timeout = max(0.0, min(deadline - now, poll))
            try:
                ready_r, ready_w, _ = select.select(watch, writers, [], timeout)
            except InterruptedError:
                continue
            for fd in ready_w:
                data = self.pending[fd]
                try:
                    written = os.write(fd, data[: 1 << 16])
                except (BrokenPipeError, OSError):
                    written = len(data)
                data = data[written:]
                if data:
                    self.pending[fd] = data
                else:
                    del self.pending[fd]
                    os.close(fd)
            for fd in ready_r:
                if fd == self.pidfd:
                    continue  # the exit is collected at the top of the loop
                try:
                    chunk = os.read(fd, 1 << 16)
                except OSError:
                    chunk = b""
                if not chunk:
                    readers.discard(fd)
                    os.close(fd)
                    continue
                if fd == self.fds["events"]:
                    if len(self.events_buf) < 16 << 20:
                        self.events_buf += chunk
                    continue
                self.output_total += len(chunk)
                if fd == self.fds["stdout"]:
                    if len(self.stdout) < cap:
                        self.stdout += chunk[: cap - len(self.stdout)]
                else:
                    self.stderr_total += len(chunk)
                    self.stderr += chunk
                    if len(self.stderr) > 2 * STDERR_KEEP:  # keep the head and the tail
                        self.stderr = self.stderr[:STDERR_KEEP] + self.stderr[-STDERR_KEEP:]
                if self.output_total > cap and self.status is None:
                    self.killed_for = "output_limit"
                    kill_all(reaped)

    def close(self) -> None:
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None
        for fd in list(self.pending):
            try:
                os.close(fd)
            except OSError:
                pass
        self.pending.clear()
        for name in ("stdout", "stderr", "events"):
            try:
                os.close(self.fds[name])
            except OSError:
                pass

    def events(self, token: str) -> list[dict]:
        """Events carrying the job's token; lines without it (forged or garbled) are dropped."""
        result = []
        for line in bytes(self.events_buf).split(b"\n"):
            if not line:
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict) and event.get("t") == token:
                try:
                    event["m"] = bytes.fromhex(str(event.get("m", ""))).decode("utf-8", "replace")
                except ValueError:
                    continue
                result.append(event)
        return result

    def stderr_text(self) -> str:
        text = bytes(self.stderr).decode("utf-8", "replace")
        if self.stderr_total > len(self.stderr):
            head, tail = text[:STDERR_KEEP], text[-STDERR_KEEP:]
            text = f"{head}\n... [{self.stderr_total - len(self.stderr)} bytes cut] ...\n{tail}"
        return text

    def exit_description(self) -> str:
        status = self.status
        if status is None:
            return "did not exit"
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            try:
                return f"killed by {signal.Signals(sig).name}"
            except ValueError:
                return f"killed by signal {sig}"
        return f"exit status {os.WEXITSTATUS(status)}"

    def exited_ok(self) -> bool:
        return self.status is not None and os.WIFEXITED(self.status) and os.WEXITSTATUS(self.status) == 0


def reap(reaped: dict) -> None:
    """Collect every dead child (PID 1 adopts all orphans), remembering statuses by pid."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        reaped[pid] = status


def other_pids() -> list[int]:
    me = os.getpid()
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != me:
            pids.append(int(name))
    return pids


def kill_all(reaped: dict, wait_s: float = 2.0) -> bool:
    """SIGKILL every process in the container but this one; True when none is left."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        except PermissionError:
            pass
        reap(reaped)
        if not other_pids():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.005)


def wipe(path: str) -> bool:
    """Empty a work directory (not the directory itself, a mount point); True on success."""
    ok = True
    try:
        entries = os.listdir(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    for name in entries:
        full = os.path.join(path, name)
        try:
            if os.path.isdir(full) and not os.path.islink(full):
                for root, dirs, files in os.walk(full, topdown=False):
                    for f in files:
                        os.unlink(os.path.join(root, f))
                    for d in dirs:
                        sub = os.path.join(root, d)
                        if os.path.islink(sub):
                            os.unlink(sub)
                        else:
                            os.rmdir(sub)
                os.chmod(full, 0o700)
                os.rmdir(full)
            else:
                os.unlink(full)
        except OSError:
            # A directory the program made unwritable: make it writable and try once more.
            try:
                for root, dirs, _ in os.walk(full):
                    os.chmod(root, 0o700)
                    for d in dirs:
                        os.chmod(os.path.join(root, d), 0o700)
                import shutil

                shutil.rmtree(full)
            except OSError:
                ok = False
    return ok


def ipc_objects() -> int:
    count = 0
    for kind in ("shm", "sem", "msg"):
        try:
            with open(f"/proc/sysvipc/{kind}") as f:
                count += max(0, len(f.readlines()) - 1)
        except OSError:
            pass
    return count


def cleanup(reaped: dict) -> list[str]:
    """Return the container to a clean state; the list names what could not be cleaned."""
    problems = []
    if not kill_all(reaped):
        problems.append(f"processes survived SIGKILL: {other_pids()}")
    for path in WORK_DIRS:
        if not wipe(path):
            problems.append(f"could not empty {path}")
    if ipc_objects():
        problems.append("SysV IPC objects were left behind")
    return problems


# --- judging --------------------------------------------------------------------------------------
def _trim(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit // 2] + "\n...\n" + text[-limit // 2:]


def run_stdio_job(job: dict, limits: dict, reaped: dict, job_deadline: float) -> list[dict]:
    cases = job.get("cases") or []
    options = job.get("compare") or {}
    mode = options.get("mode", "tokens")
    float_tol = float(options.get("float_tol", 1e-6))
    case_sensitive = bool(options.get("case_sensitive", True))
    stop = bool(limits.get("stop_on_failure", True))
    results = []
    failed = False
    for index, case in enumerate(cases):
        name = f"case {index}"
        if failed and stop:
            results.append({"name": name, "verdict": "skipped", "message": "not run: an earlier case failed"})
            continue
        if time.monotonic() >= job_deadline:
            results.append({"name": name, "verdict": "timeout", "message": "not run: the total time limit was reached"})
            failed = True
            continue
        token = os.urandom(16).hex()
        started = time.monotonic()
        child = Child("stdio", prepare.stdio_payload(job["program"], token), limits,
                      str(case.get("input", "")).encode())
        oom_before = _oom_kills()
        try:
            child.run(min(started + float(limits["timeout_s"]), job_deadline), reaped)
        finally:
            child.close()
        elapsed = time.monotonic() - started
        events = child.events(token)
        stdout = bytes(child.stdout).decode("utf-8", "replace")
        stderr = child.stderr_text()
        result = {"name": name, "time_s": round(elapsed, 4)}
        if child.killed_for == "timeout":
            result.update(verdict="timeout", message=f"no exit within {limits['timeout_s']}s")
        elif child.killed_for == "output_limit":
            result.update(verdict="output_limit", message=f"wrote more than {limits['output_bytes']} bytes")
        elif any(e["e"] == "memory" for e in events) or (0 <= oom_before < _oom_kills()):
            result.update(verdict="memory_limit", message=f"exceeded {limits['memory_mb']} MB")
        elif any(e["e"] == "compile_error" for e in events):
            message = next(e["m"] for e in events if e["e"] == "compile_error")
            result.update(verdict="runtime_error", message=f"the program does not compile: {message}")
        elif not child.exited_ok():
            hint = " (MemoryError)" if "MemoryError" in stderr[-2000:] else ""
            result.update(verdict="memory_limit" if hint else "runtime_error",
                          message=f"{child.exit_description()}{hint}")
        elif compare.outputs_match(str(case.get("output", "")), stdout, mode, float_tol, case_sensitive):
            result.update(verdict="passed")
        else:
            result.update(verdict="wrong_answer",
                          message=compare.first_difference(str(case.get("output", "")), stdout))
        if result["verdict"] != "passed":
            failed = True
            result["stderr"] = _trim(stderr, 2000)
        if job.get("return_stdout", False):
            result["stdout"] = _trim(stdout, 4000)
        results.append(result)
    return results


def run_function_job(job: dict, limits: dict, reaped: dict, job_deadline: float) -> tuple[list[dict], str]:
    """Returns (per-test results, harness error or '')."""
    token = os.urandom(16).hex()
    try:
        payload = prepare.function_payload(job, token)
    except (SyntaxError, ValueError, TypeError) as exc:
        return [], f"the tests cannot be prepared: {type(exc).__name__}: {exc}"
    started = time.monotonic()
    oom_before = _oom_kills()
    child = Child("function", payload, limits, b"")
    try:
        child.run(min(started + float(limits["timeout_s"]), job_deadline), reaped)
    finally:
        child.close()
    elapsed = time.monotonic() - started
    events = child.events(token)
    stderr = _trim(child.stderr_text(), 2000)
    errors = [e["m"] for e in events if e["e"] == "harness_error"]
    if errors:
        return [], errors[0]
    plan = next((e["n"] for e in events if e["e"] == "plan"), None)
    if plan is None:
        tests = job.get("tests")
        plan = len(tests) if tests is not None else 1
    names = job.get("test_names") or []
    results: list[dict | None] = [None] * plan
    running = -1
    for event in events:
        index = event.get("i", -1)
        if event["e"] == "start":
            running = index
        elif event["e"] == "end" and 0 <= index < plan and results[index] is None:
            entry = {"verdict": event["v"] if event["v"] in VERDICTS else "runtime_error"}
            if event["m"]:
                entry["message"] = event["m"]
            results[index] = entry
            if index == running:
                running = -1
    done = any(e["e"] == "done" for e in events)
    if child.killed_for:
        cause, message = child.killed_for, (f"no exit within {limits['timeout_s']}s" if child.killed_for == "timeout"
                                            else f"wrote more than {limits['output_bytes']} bytes")
    elif 0 <= oom_before < _oom_kills():
        cause, message = "memory_limit", f"exceeded {limits['memory_mb']} MB"
    elif not done:
        cause = "runtime_error"
        message = f"the program ended the run before the tests completed ({child.exit_description()})"
    else:
        cause, message = "", ""
    # Tests reported before the run was cut short keep their verdicts; the rest get its cause. After
    # a timeout only the test that was running timed out; the ones after it never ran.
    for index in range(plan):
        if results[index] is not None:
            continue
        if not cause:
            results[index] = {"verdict": "runtime_error", "message": "no verdict reported"}
        elif cause == "timeout" and 0 <= running != index:
            results[index] = {"verdict": "skipped", "message": "not reached"}
        else:
            results[index] = {"verdict": cause, "message": message}
    final = []
    for index, entry in enumerate(results):
        entry = dict(entry)
        entry["name"] = names[index] if index < len(names) else f"test {index}"
        if entry["verdict"] != "passed" and stderr:
            entry["stderr"] = stderr
        final.append(entry)
    if final:
        final[0]["time_s"] = round(elapsed, 4)
    return final, ""


def run_job(job: dict, reaped: dict) -> dict:
    limits = {"timeout_s": 10.0, "memory_mb": 512, "output_bytes": 1 << 20, "file_size_mb": 16,
              "total_timeout_s": 60.0, "stop_on_failure": True}
    limits.update(job.get("limits") or {})
    started = time.monotonic()
    job_deadline = started + float(limits["total_timeout_s"])
    mode = job.get("mode")
    result: dict = {"id": job.get("id", ""), "tests": [], "error": ""}
    if not isinstance(job.get("program"), str):
        result["error"] = "the job has no program text"
    elif mode == "stdio":
        result["tests"] = run_stdio_job(job, limits, reaped, job_deadline)
    elif mode == "function":
        result["tests"], result["error"] = run_function_job(job, limits, reaped, job_deadline)
    else:
        result["error"] = f"unknown mode {mode!r}; expected 'stdio' or 'function'"
    result["wall_s"] = round(time.monotonic() - started, 4)
    return result


# --- main loop ------------------------------------------------------------------------------------
def _send(obj: dict) -> None:
    data = memoryview((json.dumps(obj) + "\n").encode())
    while data:
        try:
            written = os.write(1, data)
        except InterruptedError:
            continue
        data = data[written:]


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # PID 1 with default handlers is unkillable from inside
    protected = _set_undumpable()
    once = "--once" in argv
    idle_exit = 600.0
    if "--idle-exit" in argv:
        idle_exit = float(argv[argv.index("--idle-exit") + 1])
    harness = os.environ.get("AREAL_HARNESS_HASH", "")
    reaped: dict = {}
    problems = cleanup(reaped)
    _send({"ready": True, "harness": harness, "python": sys.version.split()[0], "pid": os.getpid(),
           "uid": os.getuid(), "protected": protected, "problems": problems})
    buffer = b""
    while True:
        while b"\n" not in buffer:
            ready, _, _ = select.select([0], [], [], idle_exit)
            if not ready:
                return 0  # nobody asked for anything for a long time: go away (and be removed)
            try:
                chunk = os.read(0, 1 << 20)
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                return 0
            if not chunk:
                return 0  # the host closed stdin
            buffer += chunk
            reap(reaped)
        line, buffer = buffer.split(b"\n", 1)
        if not line.strip():
            continue
        try:
            job = json.loads(line)
            if not isinstance(job, dict):
                raise ValueError("a job must be a JSON object")
        except ValueError as exc:
            _send({"id": "", "tests": [], "error": f"bad job: {exc}", "harmed": False, "problems": []})
            continue
        try:
            result = run_job(job, reaped)
        except Exception as exc:  # a bug here must not look like a verdict
            result = {"id": job.get("id", ""), "tests": [], "error": f"supervisor failed: {type(exc).__name__}: {exc}"}
        cleanup_started = time.monotonic()
        problems = cleanup(reaped)
        result["cleanup_s"] = round(time.monotonic() - cleanup_started, 4)
        reaped.clear()
        result["harmed"] = bool(problems)
        result["problems"] = problems
        _send(result)
        if once or problems:
            return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
