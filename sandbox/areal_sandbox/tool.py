"""The `python` tool: a workflow's model writes Python, it runs here, the model reads what it printed.

Each call is one program in the Docker sandbox, with the isolation of the code reward (no network, read-only
root, no host mounts, an unprivileged user, memory, process and output limits, a CPU-time limit and a wall-clock one; see
README.md): a fork bomb, a flood of output, a write to the host or a process left running cannot reach the host
or outlive the call. What the model reads is stdout, then stderr (a traceback), cut to the tool's output limit;
a program past its time or output limit reads as an error saying so. The call never raises for anything the
program does.

Tool options (workflow option `tool_options: {python: {...}}`): timeout_s (CPU seconds, default 5), wall_factor
(a call that sleeps or waits ends at timeout_s * wall_factor seconds, default 2), memory_mb (256), output_bytes
(64 KiB), image, pool_size (containers kept warm per process, default 4).
"""
from __future__ import annotations

from typing import Any

from areal_sandbox.types import Execution, SandboxConfig

DEFAULT_TIMEOUT_S = 5.0
_KEYS = {"timeout_s": float, "wall_factor": float, "memory_mb": int, "output_bytes": int, "image": str,
         "pool_size": int}


def tool_config(options: dict[str, Any]) -> SandboxConfig:
    # wall_factor 2, not the sandbox's 3: an episode waits for each call, so a sleeping call ends sooner.
    values: dict[str, Any] = {"pool_size": 4, "timeout_s": DEFAULT_TIMEOUT_S, "wall_factor": 2.0, "memory_mb": 256,
                              "output_bytes": 1 << 16}
    for key, value in options.items():
        if key not in _KEYS:
            raise ValueError(f"python tool: unknown option {key!r} (options: {', '.join(_KEYS)})")
        try:
            values[key] = _KEYS[key](value)
        except (TypeError, ValueError):
            raise ValueError(f"python tool: option {key}={value!r} is not a {_KEYS[key].__name__}") from None
    values["total_timeout_s"] = values["timeout_s"] + 5.0
    config = SandboxConfig(**values)
    config.validate()
    return config


def python_tool(arguments: str, **options: Any):
    """Run `arguments` as a Python program in the sandbox; returns what it printed (a ToolResult)."""
    from areal_core.workflows import ToolResult
    from areal_sandbox.docker_backend import shared_sandbox

    config = tool_config(options)
    execution = Execution(mode="stdio", program=arguments, cases=({"input": "", "output": ""},), return_stdout=True,
                          compare={"mode": "exact"})
    result = shared_sandbox(config).run(execution)
    if result.error:
        return ToolResult(error=f"the sandbox failed: {result.error}")
    test = result.tests[0]
    stderr = program_traceback(test.stderr)
    printed = test.stdout + (("\n" if test.stdout and not test.stdout.endswith("\n") else "") + stderr
                             if stderr else "")
    details = {"verdict": test.verdict, "time_s": test.time_s, "cpu_s": test.cpu_s}
    if test.verdict == "timeout":
        return ToolResult(output=printed, error=f"the program ran past its time limit ({test.message})",
                          details=details)
    if test.verdict == "output_limit":
        return ToolResult(output=printed, error=f"the program printed more than {config.output_bytes} bytes",
                          details=details)
    if test.verdict == "memory_limit":
        return ToolResult(output=printed, error=f"the program ran out of memory ({config.memory_mb} MB)",
                          details=details)
    if test.verdict == "runtime_error" and not stderr and test.message:
        printed += test.message
    return ToolResult(output=printed, details=details)


def program_traceback(stderr: str) -> str:
    """stderr with a traceback's frames of the sandbox's own harness left out: the model sees its program's."""
    header = "Traceback (most recent call last):\n"
    if header not in stderr or 'File "<program>"' not in stderr:
        return stderr
    before, _, rest = stderr.partition(header)
    return before + header + rest[rest.index('  File "<program>"'):]
