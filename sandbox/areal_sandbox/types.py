"""What a sandbox is asked to run and what it answers: frozen, JSON-friendly dataclasses.

Limits are configuration (`SandboxConfig`); a sandbox backend is anything with `run` and `close`
(the `Sandbox` protocol). Two real backends exist, chosen by name in the config: ``pool`` (a warm
pool of reused containers) and ``run`` (one fresh container per execution, like ``docker run``).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

# "unsupported": the test hands the program something that cannot cross the process boundary as
# data (a lambda, an object of a class); it fails closed, with the reason (see harness/judge.py).
VERDICTS = ("passed", "wrong_answer", "runtime_error", "timeout", "memory_limit", "output_limit", "skipped",
            "unsupported")


@dataclass(frozen=True)
class SandboxConfig:
    """Where and how untrusted programs run. Every limit applies to each execution.

    backend:          "pool" (warm containers, reused) or "run" (a fresh container per execution).
    image:            the runner image (build it with `areal sandbox build-image`).
    pool_size:        containers kept warm (pool backend); also the number of executions at once.
    timeout_s:        CPU-time limit of one stdio test case, or of a whole function-mode run (the
                      program's processes together, as judges count it: a loaded machine slows a
                      program's clock, not its CPU time, so a right program is not failed for the
                      load around it, which a training run always brings).
    total_timeout_s:  CPU-time limit of one execution, all its cases together.
    wall_factor:      the same limits hold on the wall clock multiplied by this, for programs that
                      sleep or wait (no CPU time): a sleeping case ends at timeout_s * wall_factor.
    memory_mb:        address-space limit of the program (RLIMIT_AS); the container's memory
                      cgroup (no swap) is this plus the tmpfs sizes plus `overhead_mb`.
    cpus:             CPU quota of the container.
    pids_limit:       processes and threads in the container (the harness included).
    output_bytes:     stdout + stderr a program may write before it is killed (output limit).
    file_size_mb:     largest file the program may write (RLIMIT_FSIZE).
    workdir_mb, tmp_mb, shm_mb: sizes of the writable tmpfs mounts /work, /tmp and /dev/shm.
    max_uses:         executions before a pool container is replaced anyway.
    idle_exit_s:      a container nobody sends work to for this long exits (and is removed).
    start_timeout_s:  how long a new container may take to report ready.
    """

    backend: Literal["pool", "run"] = "pool"
    image: str = "areal-sandbox:latest"
    pool_size: int = 2
    timeout_s: float = 10.0
    total_timeout_s: float = 60.0
    wall_factor: float = 3.0
    memory_mb: int = 512
    overhead_mb: int = 64
    cpus: float = 1.0
    pids_limit: int = 64
    output_bytes: int = 1 << 20
    file_size_mb: int = 16
    workdir_mb: int = 64
    tmp_mb: int = 64
    shm_mb: int = 16
    max_uses: int = 1000
    idle_exit_s: float = 600.0
    start_timeout_s: float = 60.0

    def validate(self) -> None:
        if self.backend not in ("pool", "run"):
            raise ValueError(f"backend must be 'pool' or 'run', got {self.backend!r}")
        for name in ("pool_size", "memory_mb", "pids_limit", "output_bytes", "file_size_mb", "workdir_mb",
                     "tmp_mb", "shm_mb", "max_uses"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("timeout_s", "total_timeout_s", "cpus", "idle_exit_s", "start_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if not self.wall_factor >= 1:
            raise ValueError(f"wall_factor must be >= 1 (wall-clock time is never less than CPU time of one "
                             f"process), got {self.wall_factor}")

    def replace(self, **changes: Any) -> "SandboxConfig":
        return dataclasses.replace(self, **changes)

    def limits(self) -> dict[str, Any]:
        """The limits the in-container harness enforces."""
        return {"timeout_s": self.timeout_s, "total_timeout_s": self.total_timeout_s, "wall_factor": self.wall_factor,
                "memory_mb": self.memory_mb,
                "output_bytes": self.output_bytes, "file_size_mb": self.file_size_mb}


@dataclass(frozen=True)
class Execution:
    """One program and its tests.

    mode "function": `prelude` (e.g. the imports LeetCode solutions assume), the `program`, then
      `setup` (e.g. test imports), then the tests, all in one namespace: either `tests`
      (statements, one test each, e.g. MBPP asserts) or `check` (code defining
      ``check(candidate)``; each top-level statement of it holding an assert is one test) called
      with `candidate` (an expression, e.g. the entry point's name; when omitted, a trailing
      ``check(<expr>)`` in `check` gives it). The tests run in a process of their own that never
      executes the program: the candidate and the program's functions the tests call are proxies
      whose calls cross as data. `program_names` lists those functions (even one that shadows a
      built-in, like MBPP's ``sum``); None lets every name the tests read without defining it,
      other than a built-in, be the program's (fine for tests you wrote; a data set's format
      should list them, so that a helper the tests expect from the task is never the program's).
    mode "stdio": `program` runs once per case with the case's ``input`` on stdin; its stdout must
      match ``output`` under `compare` (mode tokens|lines|exact, float_tol, case_sensitive).
    """

    mode: Literal["function", "stdio"]
    program: str
    tests: tuple[str, ...] | None = None
    check: str | None = None
    candidate: str | None = None
    prelude: str = ""
    setup: str = ""
    cases: tuple[dict[str, str], ...] | None = None
    compare: dict[str, Any] = field(default_factory=dict)
    test_names: tuple[str, ...] = ()
    program_names: tuple[str, ...] | None = None
    stop_on_failure: bool = True
    timeout_s: float | None = None
    return_stdout: bool = False

    def to_job(self, config: SandboxConfig, job_id: str = "") -> dict[str, Any]:
        limits = config.limits()
        if self.timeout_s is not None:
            limits["timeout_s"] = self.timeout_s
        limits["stop_on_failure"] = self.stop_on_failure
        job: dict[str, Any] = {"id": job_id, "mode": self.mode, "program": self.program, "limits": limits,
                               "test_names": list(self.test_names), "return_stdout": self.return_stdout}
        if self.mode == "function":
            job.update(prelude=self.prelude, setup=self.setup, check=self.check, candidate=self.candidate,
                       tests=list(self.tests) if self.tests is not None else None,
                       program_names=None if self.program_names is None else list(self.program_names))
        else:
            job.update(cases=[dict(c) for c in self.cases or ()], compare=dict(self.compare))
        return job


@dataclass(frozen=True)
class TestVerdict:
    """The outcome of one test: verdict is one of VERDICTS; stderr is truncated. time_s and cpu_s:
    the wall-clock and CPU time of its run (a function-mode run's on its first test)."""

    name: str
    verdict: str
    message: str = ""
    stderr: str = ""
    time_s: float | None = None
    stdout: str = ""
    cpu_s: float | None = None

    @property
    def passed(self) -> bool:
        return self.verdict == "passed"

    def to_dict(self) -> dict[str, Any]:
        data = {"name": self.name, "verdict": self.verdict}
        if self.message:
            data["message"] = self.message
        if self.stderr:
            data["stderr"] = self.stderr
        if self.time_s is not None:
            data["time_s"] = self.time_s
        if self.cpu_s is not None:
            data["cpu_s"] = self.cpu_s
        if self.stdout:
            data["stdout"] = self.stdout
        return data


@dataclass(frozen=True)
class ExecutionResult:
    """What a sandbox answers. `error` is set when the *sandbox* failed (harness error, container
    lost, tests that cannot be prepared): then the verdicts say nothing about the program.
    `stand_ins` (function mode) counts the program's objects that are not data (a ``re.Match``)
    for which the tests got a stand-in equal only to itself (harness/judge.py)."""

    tests: tuple[TestVerdict, ...]
    error: str = ""
    wall_s: float = 0.0
    harmed: bool = False
    problems: tuple[str, ...] = ()
    stand_ins: int = 0

    @property
    def passed(self) -> bool:
        return not self.error and bool(self.tests) and all(t.passed for t in self.tests)

    @property
    def fraction_passed(self) -> float:
        return sum(t.passed for t in self.tests) / len(self.tests) if self.tests else 0.0

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> "ExecutionResult":
        tests = tuple(
            TestVerdict(name=str(t.get("name", f"test {i}")), verdict=str(t.get("verdict", "runtime_error")),
                        message=str(t.get("message", "")), stderr=str(t.get("stderr", "")), time_s=t.get("time_s"),
                        stdout=str(t.get("stdout", "")), cpu_s=t.get("cpu_s"))
            for i, t in enumerate(data.get("tests") or [])
        )
        return cls(tests=tests, error=str(data.get("error") or ""), wall_s=float(data.get("wall_s") or 0.0),
                   harmed=bool(data.get("harmed")), problems=tuple(data.get("problems") or ()),
                   stand_ins=int(data.get("stand_ins") or 0))

    @classmethod
    def failure(cls, error: str) -> "ExecutionResult":
        return cls(tests=(), error=error)


class Sandbox(Protocol):
    """Runs untrusted programs. Thread-safe; use as a context manager or call `close`."""

    config: SandboxConfig

    def run(self, execution: Execution) -> ExecutionResult:
        """Run one execution; never raises for anything the program does."""
        ...

    def close(self) -> None:
        """Stop and remove every container this sandbox started."""
        ...
