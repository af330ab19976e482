"""areal-code: code-generation tasks scored by running the program against unit tests.

The reward ``code`` extracts the program from the response (see `areal_code.extract`), builds the
tests from the sample's fields (HumanEval, MBPP, LeetCode-style ``check(candidate)``, or
stdin/stdout cases; see `areal_code.formats`) and runs them in the local Docker sandbox
(`areal-sandbox`; build its image once with `areal sandbox build-image`).

Reward options (task spec ``reward.options`` or ``areal score --option k=v``):
  format           auto (default) | humaneval | mbpp | leetcode | stdio
  reward           all (default: 1.0 when every test passes) | fraction (share of tests passed)
  language, block, no_block   how the program is found (python, last, raw)
  timeout          seconds per stdio case, or for a whole function-mode run (default 6)
  total_timeout    seconds for all cases of one response (default 20; keep it below `areal score --timeout`)
  memory_mb        memory of the program (default 512); output_bytes (default 1 MiB)
  compare, float_tol, case_sensitive   stdio output comparison (tokens, 1e-6, true)
  max_cases        run at most this many stdio cases; stop_on_failure (stdio; default: reward == all)
  prelude, candidate   leetcode: code run before the program; the candidate expression
  image, backend, pool_size   the sandbox (areal-sandbox:latest, pool, up to 4 containers per process)

The reward mostly waits for its container, so it is registered io_bound: each reward worker process runs
up to CODE_CONCURRENCY programs at once (in threads, one warm container each, started as needed), and a
program that loops to its timeout holds only its own container. More at once per worker:
`reward.concurrency.code=N` with `pool_size=N` (`areal score --reward-concurrency code=N --option pool_size=N`).
"""
from __future__ import annotations

from collections import Counter
from typing import Any

from areal_core import RewardResult, hookimpl
from areal_core.errors import ConfigError
from areal_code.extract import extract_code
from areal_code.formats import BUILDERS, FORMATS, detect_format

__version__ = "0.1.0"

REWARD_MODES = ("all", "fraction")
# Programs one reward worker process runs at once (each in its own warm container).
CODE_CONCURRENCY = 4
MAX_REPORTED_TESTS = 50
_SANDBOX_KEYS = {"image": str, "backend": str, "pool_size": int, "memory_mb": int, "output_bytes": int,
                 "timeout": float, "total_timeout": float, "wall_factor": float, "cpus": float, "pids_limit": int}


def sandbox_config(options: dict[str, Any]):
    """The sandbox config a reward call asks for (up to CODE_CONCURRENCY warm containers per process)."""
    from areal_sandbox import SandboxConfig

    values: dict[str, Any] = {"pool_size": CODE_CONCURRENCY, "timeout_s": 6.0, "total_timeout_s": 20.0}
    for key, kind in _SANDBOX_KEYS.items():
        if key in options and options[key] is not None:
            try:
                value = kind(options[key])
            except (TypeError, ValueError):
                raise ConfigError(f"reward option {key}={options[key]!r}: expected a {kind.__name__}") from None
            values[{"timeout": "timeout_s", "total_timeout": "total_timeout_s"}.get(key, key)] = value
    config = SandboxConfig(**values)
    try:
        config.validate()
    except ValueError as exc:
        raise ConfigError(f"code reward options: {exc}") from None
    return config


def code_reward(sample: dict[str, Any], response: str, **options: Any) -> RewardResult:
    """Run the response's program against the sample's tests in the Docker sandbox."""
    from areal_sandbox import shared_sandbox

    fmt = options.get("format") or "auto"
    if fmt == "auto":
        fmt = detect_format(sample)
    if fmt not in BUILDERS:
        raise ConfigError(f"reward option format={fmt!r}: expected auto or one of {', '.join(FORMATS)}")
    mode = options.get("reward", "all")
    if mode not in REWARD_MODES:
        raise ConfigError(f"reward option reward={mode!r}: expected one of {', '.join(REWARD_MODES)}")
    compare = options.get("compare", "tokens")
    if compare not in ("tokens", "lines", "exact"):
        raise ConfigError(f"reward option compare={compare!r}: expected tokens, lines or exact")
    options = dict(options)
    options.setdefault("stop_on_failure", mode == "all")

    code, found = extract_code(response, options.get("language", "python"), options.get("block", "last"),
                               options.get("no_block", "raw"))
    details: dict[str, Any] = {"format": fmt, "extracted": found, "program_chars": len(code)}
    if not code.strip():
        details["reason"] = "no program found in the response"
        return RewardResult(score=0.0, correct=False, details=details)

    execution = BUILDERS[fmt](sample, code, options)
    result = shared_sandbox(sandbox_config(options)).run(execution)
    if result.error:
        return RewardResult.failure(f"code sandbox: {result.error}", **details)

    passed = sum(t.passed for t in result.tests)
    total = len(result.tests)
    correct = total > 0 and passed == total
    details.update(
        passed=passed,
        total=total,
        verdicts=dict(Counter(t.verdict for t in result.tests)),
        tests=[_short(t.to_dict()) for t in result.tests[:MAX_REPORTED_TESTS]],
        wall_s=result.wall_s,
    )
    if total > MAX_REPORTED_TESTS:
        details["tests_cut"] = total - MAX_REPORTED_TESTS
    if result.stand_ins:
        details["stand_ins"] = result.stand_ins
    score = (1.0 if correct else 0.0) if mode == "all" else (passed / total if total else 0.0)
    return RewardResult(score=score, correct=correct, details=details)


def _short(test: dict[str, Any]) -> dict[str, Any]:
    for key, limit in (("stderr", 1000), ("message", 500), ("stdout", 500)):
        if key in test and len(test[key]) > limit:
            test[key] = test[key][: limit // 2] + " ... " + test[key][-limit // 2:]
    return test


@hookimpl
def register_rewards(register):
    register("code", code_reward, io_bound=True, concurrency=CODE_CONCURRENCY,
             description="Runs the response's program against the sample's unit tests in the Docker sandbox "
                         "(HumanEval, MBPP, LeetCode check(), stdin/stdout); 1.0 when all pass.")


@hookimpl
def register_audit_mutators(register):
    from areal_code.audit import code_variants

    register("code", code_variants, description="perturbed, stub and exiting programs; output near misses; "
                                                "fences and whitespace that must still pass")
