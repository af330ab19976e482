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

Function mode: verdicts come from the tests' process (judge.py), forked from this one without exec
(so undumpable too) before the program starts, and reported on a pipe only it holds; the program
(runner.py, a fresh interpreter) only serves calls whose arguments and results cross as data. The
trust boundary is described in judge.py.
"""
from __future__ import annotations

import errno
import fcntl
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
import judge  # noqa: E402
import prepare  # noqa: E402
import wire  # noqa: E402,F401  (imported once here, so that every forked tests' process has it)

# Modules data sets' tests and preludes import, imported once here so that the tests' process,
# forked from this one, starts with them.
for _name in ("bisect", "collections", "copy", "datetime", "decimal", "fractions", "functools", "heapq",
              "itertools", "math", "operator", "random", "re", "string", "types", "typing"):
    __import__(_name)

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
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
CPU_CHECK_S = 0.05  # how often a running program's CPU time is read
VERDICTS = ("passed", "wrong_answer", "runtime_error", "timeout", "memory_limit", "output_limit", "skipped",
            "unsupported")


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


def cpu_seconds() -> float:
    """CPU time of every process in the container but this one, finished or running: the ones
    reaped here through os.times() (PID 1 adopts and reaps every orphan), the rest through
    /proc/PID/stat (their own time and that of the children they waited for). Limits are CPU time,
    as judges count it, because a loaded machine slows a program's clock, not its CPU time."""
    times = os.times()
    total = times.children_user + times.children_system
    for pid in other_pids():
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile: reaped here, so counted by the next os.times()
        total += sum(int(x) for x in fields[11:15]) / CLOCK_TICKS  # utime stime cutime cstime
    return total


def _arrange_fds(targets: dict[int, int]) -> None:
    """In a forked child: make fd `target` a copy of fd `source` for each pair, close the rest.
    Sources are first moved above every target, so that no dup2 overwrites a source still needed."""
    moved = {target: fcntl.fcntl(source, fcntl.F_DUPFD, 100) for target, source in targets.items()}
    for target, source in moved.items():
        os.dup2(source, target)
    os.closerange(max(targets) + 1, 65536)
    for target in targets:
        os.set_inheritable(target, True)


class Child:
    """One run of the program (runner.py) with pipes for stdin, stdout and stderr, and fds 3 and 4:
    in stdio mode the job and the program's events; in function mode the calls from the tests'
    process and the replies to it (`channel`), the tests' events arriving on `events_fd`."""

    def __init__(self, mode: str, limits: dict, stdin_data: bytes, payload: bytes = b"",
                 channel: tuple[int, int] | None = None, events_fd: int | None = None,
                 judge_pid: int | None = None) -> None:
        self.limits = limits
        self.judge_pid = judge_pid
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        if channel is None:
            job_r, job_w = os.pipe()
            ev_r, ev_w = os.pipe()
            fd3, fd4, own = job_r, ev_w, (job_r, ev_w)
        else:
            fd3, fd4 = channel
            job_w, ev_r, own = None, events_fd, ()
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
                _arrange_fds({0: in_r, 1: out_w, 2: err_w, 3: fd3, 4: fd4})
                os.chdir("/work")
                os.execve(sys.executable, [sys.executable, "-I", "-B", "-c", RUNNER_BOOT, mode], CHILD_ENV)
            except BaseException:
                pass
            os._exit(127)
        for fd in (in_r, out_w, err_w) + own:
            os.close(fd)
        try:  # readable when the child exits, so select() wakes at once
            self.pidfd: int | None = os.pidfd_open(self.pid)
        except (AttributeError, OSError):
            self.pidfd = None
        self.fds = {"stdin": in_w, "stdout": out_r, "stderr": err_r, "events": ev_r}
        self.pending = {in_w: memoryview(stdin_data)}
        if job_w is not None:
            self.fds["job"] = job_w
            self.pending[job_w] = memoryview(payload)
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
        self.killed_for = ""  # "timeout" (wall clock) | "cpu_timeout" | "output_limit"

    def run(self, deadline: float, cpu_deadline: float, reaped: dict) -> None:
        """Feed input, collect output and events until the child exits and its pipes close, or the
        wall-clock deadline passes, or the container's processes have used CPU time up to
        `cpu_deadline` (a `cpu_seconds()` reading), or the output cap is exceeded (then everything
        is killed)."""
        readers = {self.fds["stdout"], self.fds["stderr"], self.fds["events"]}
        cap = int(self.limits["output_bytes"])
        exited_at = swept_at = judge_done_at = None
        cpu_checked_at = time.monotonic()
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
            now = time.monotonic()
            if self.status is not None and exited_at is None:
                exited_at = now
            # The run is over when the program has exited (stdio), or when the tests' process has
            # closed its events (function mode; the program, told so by the end of its calls,
            # exits at once; one that does not within 0.5 s is not waited for): whatever is left
            # running goes now, so the pipes reach EOF. A tests' process still waiting 2 s after
            # the program exited is held up by a process the program left.
            judge_done = self.judge_pid is not None and self.fds["events"] not in readers
            if judge_done and judge_done_at is None:
                judge_done_at = now
            if swept_at is None and ((judge_done and (exited_at is not None or now - judge_done_at > 0.5))
                                     or (exited_at is not None and (self.judge_pid is None or now - exited_at > 2.0))):
                swept_at = now
                kill_all(reaped)
            if not readers and not self.pending and swept_at is not None:
                return
            if swept_at is None and now >= deadline:
                self.killed_for = "timeout"
                swept_at = now
                kill_all(reaped)
                continue
            if swept_at is None and now - cpu_checked_at >= CPU_CHECK_S:
                cpu_checked_at = now
                if cpu_seconds() >= cpu_deadline:
                    self.killed_for = "cpu_timeout"
                    swept_at = now
                    kill_all(reaped)
                    continue
            if swept_at is not None and now - swept_at > 2.0:
                return  # pipes held open by something that survived kill_all: reported as harm
            writers = [fd for fd in self.pending]
            watch = list(readers)
            if self.status is None and self.pidfd is not None:
                watch.append(self.pidfd)
                poll = CPU_CHECK_S
            else:
                poll = 0.01 if swept_at is None else 0.05
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
                if self.output_total > cap and swept_at is None:
                    self.killed_for = "output_limit"
                    swept_at = time.monotonic()
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

    def judge_events(self) -> list[dict]:
        """The tests' process's events (function mode), one JSON object per line; only that process
        holds the write end of this pipe. A line cut short (the process was killed) is dropped."""
        result = []
        for line in bytes(self.events_buf).split(b"\n"):
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict) and isinstance(event.get("e"), str):
                result.append(event)
        return result

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


class Budget:
    """An execution's time limits: each program run may use `timeout_s` of CPU time, all runs
    together `total_timeout_s`; on the wall clock each may take `wall_factor` times as long (a
    program that sleeps or waits uses no CPU time)."""

    def __init__(self, limits: dict) -> None:
        self.timeout_s = float(limits["timeout_s"])
        self.total_s = float(limits["total_timeout_s"])
        self.factor = float(limits["wall_factor"])
        self.wall_deadline = time.monotonic() + self.total_s * self.factor
        self.cpu_deadline = cpu_seconds() + self.total_s

    def exhausted(self) -> bool:
        return time.monotonic() >= self.wall_deadline or cpu_seconds() >= self.cpu_deadline

    def run_deadlines(self, started: float, cpu_started: float) -> tuple[float, float]:
        """(wall-clock deadline, CPU deadline) of one program run starting at these readings."""
        return (min(started + self.timeout_s * self.factor, self.wall_deadline),
                min(cpu_started + self.timeout_s, self.cpu_deadline))

    def timeout_message(self, killed_for: str, deadlines: tuple[float, float]) -> str:
        wall, cpu = deadlines
        if killed_for == "cpu_timeout":
            if cpu == self.cpu_deadline:
                return f"the execution's {self.total_s:g}s of CPU time (all runs together) ran out"
            return f"used more than {self.timeout_s:g}s of CPU time"
        if wall == self.wall_deadline:
            return f"the execution's {self.total_s * self.factor:g}s of wall-clock time ran out"
        return f"no exit within {self.timeout_s * self.factor:g}s of wall-clock time"


def run_stdio_job(job: dict, limits: dict, reaped: dict, budget: Budget) -> list[dict]:
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
        if budget.exhausted():
            results.append({"name": name, "verdict": "timeout", "message": "not run: the total time limit was reached"})
            failed = True
            continue
        token = os.urandom(16).hex()
        started, cpu_started = time.monotonic(), cpu_seconds()
        deadlines = budget.run_deadlines(started, cpu_started)
        child = Child("stdio", limits, str(case.get("input", "")).encode(),
                      payload=prepare.stdio_payload(job["program"], token))
        oom_before = _oom_kills()
        try:
            child.run(*deadlines, reaped)
        finally:
            child.close()
        elapsed = time.monotonic() - started
        events = child.events(token)
        stdout = bytes(child.stdout).decode("utf-8", "replace")
        stderr = child.stderr_text()
        result = {"name": name, "time_s": round(elapsed, 4), "cpu_s": round(cpu_seconds() - cpu_started, 4)}
        if child.killed_for in ("timeout", "cpu_timeout"):
            result.update(verdict="timeout", message=budget.timeout_message(child.killed_for, deadlines))
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


def start_judge(prepared: dict, request_fd: int, reply_fd: int, event_fd: int) -> int:
    """Fork the tests' process (judge.py). No exec: it inherits this process's undumpable state
    from its first instruction, and the modules imported here."""
    pid = os.fork()
    if pid == 0:  # child: never return into the supervisor's code
        try:
            devnull = os.open(os.devnull, os.O_RDWR)
            # fds 0-2 are the container's protocol here: the tests' output goes nowhere instead.
            _arrange_fds({0: devnull, 1: devnull, 2: devnull, 3: request_fd, 4: reply_fd, 5: event_fd})
            os.chdir("/")
            try:
                with open("/proc/self/oom_score_adj", "w") as f:
                    f.write("500")  # out of memory, the program goes first, then this, never PID 1
            except OSError:
                pass
            sys.stdout = sys.stderr = open(1, "w", closefd=False)
            judge.main(prepared, 3, 4, 5)
        except BaseException:
            pass
        os._exit(0)
    return pid


def run_function_job(job: dict, limits: dict, reaped: dict, budget: Budget) -> tuple[list[dict], str, int]:
    """Returns (per-test results, harness error or '', stand-ins the tests got for objects that
    are not data)."""
    try:
        prepared = prepare.function_job(job)
    except (SyntaxError, ValueError, TypeError) as exc:
        return [], f"the tests cannot be prepared: {type(exc).__name__}: {exc}", 0
    started, cpu_started = time.monotonic(), cpu_seconds()
    deadlines = budget.run_deadlines(started, cpu_started)
    oom_before = _oom_kills()
    request_r, request_w = os.pipe()
    reply_r, reply_w = os.pipe()
    events_r, events_w = os.pipe()
    judge_pid = start_judge(prepared, request_w, reply_r, events_w)
    for fd in (request_w, reply_r, events_w):  # the program must never hold these
        os.close(fd)
    try:
        child = Child("function", limits, b"", channel=(request_r, reply_w), events_fd=events_r, judge_pid=judge_pid)
    finally:
        os.close(request_r)
        os.close(reply_w)
    try:
        child.run(*deadlines, reaped)
    finally:
        child.close()
    elapsed, cpu_used = time.monotonic() - started, cpu_seconds() - cpu_started
    events = child.judge_events()
    stderr = _trim(child.stderr_text(), 2000)
    errors = [e.get("m", "") for e in events if e["e"] == "harness_error"]
    if errors:
        return [], errors[0], 0
    plan = prepared["total"]

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
    gone = next((str(e.get("m", "")) for e in events if e["e"] == "gone"), None)
    if child.killed_for in ("timeout", "cpu_timeout"):
        cause, message = "timeout", budget.timeout_message(child.killed_for, deadlines)
    elif child.killed_for:
        cause, message = child.killed_for, f"wrote more than {limits['output_bytes']} bytes"
    elif 0 <= oom_before < _oom_kills():
        cause, message = "memory_limit", f"exceeded {limits['memory_mb']} MB"
    elif done:
        cause, message = "", ""
    elif gone is not None:
        cause = "runtime_error"
        message = f"{gone or 'the program stopped replying'} before the tests completed ({child.exit_description()})"
    else:  # nothing kills the tests' process but the program (signals from the same user)
        cause = "runtime_error"
        message = ("the tests' process was stopped before the tests completed, which only the program can do "
                   f"(the program: {child.exit_description()})")
    void = next((e for e in events if e["e"] == "void"), None)
    if void is None and cause and not done and prepared["all_or_nothing"]:
        # check() has checks between its tests and did not finish: the program may have cut the
        # run short to escape one of them, so the tests it passed before do not count.
        void = {"v": cause, "m": f"check() did not finish: {message}"}
    if void is not None:  # check() failed outside its tests: no test of this run passes
        for index, entry in enumerate(results):
            if entry is not None and entry["verdict"] == "passed":
                results[index] = {"verdict": void["v"] if void["v"] in VERDICTS else "runtime_error",
                                  "message": str(void.get("m", ""))}
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
        final[0]["time_s"], final[0]["cpu_s"] = round(elapsed, 4), round(cpu_used, 4)
    stand_ins = next((int(e.get("n") or 0) for e in events if e["e"] == "done"), 0)
    return final, "", stand_ins


def run_job(job: dict, reaped: dict) -> dict:
    limits = {"timeout_s": 10.0, "memory_mb": 512, "output_bytes": 1 << 20, "file_size_mb": 16,
              "total_timeout_s": 60.0, "wall_factor": 3.0, "stop_on_failure": True}
    limits.update(job.get("limits") or {})
    started = time.monotonic()
    budget = Budget(limits)
    mode = job.get("mode")
    result: dict = {"id": job.get("id", ""), "tests": [], "error": ""}
    if not isinstance(job.get("program"), str):
        result["error"] = "the job has no program text"
    elif mode == "stdio":
        result["tests"] = run_stdio_job(job, limits, reaped, budget)
    elif mode == "function":
        result["tests"], result["error"], result["stand_ins"] = run_function_job(job, limits, reaped, budget)
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
