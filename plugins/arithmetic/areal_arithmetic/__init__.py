"""areal-arithmetic: generated multi-digit arithmetic problems with an exact-match reward.

This is the task of the CPU demo: a tiny model learns `123+456=` -> `975`. The answer is written least
significant digit first (reversed) by default, the order in which carries are computed, which makes
the task learnable by a small model in minutes.

Train and held-out problems never overlap: every (a, op, b) is assigned to one split by a stable hash.

`arithmetic_latency` is the same exact match behind a wait drawn from a long-tailed distribution: a remote
verifier, an LLM judge or a sandbox in miniature, for rehearsing latency-bound rewards on any machine
(task `arithmetic-latency`; `bench/bench_latency_tail.py`).
"""
from __future__ import annotations

import asyncio
import hashlib
import math
import random
import time
from statistics import NormalDist
from typing import Any, Iterator

from areal_core import RewardResult, hookimpl

__version__ = "0.1.0"

_NORMAL = NormalDist()
_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


def _is_heldout(a: int, op: str, b: int, heldout_fraction: float) -> bool:
    digest = hashlib.blake2b(f"{a}{op}{b}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 < heldout_fraction


def format_answer(value: int, reverse: bool, width: int = 0) -> str:
    digits = str(abs(value)).zfill(width)
    if reverse:
        digits = digits[::-1]
    return ("-" if value < 0 else "") + digits


def generate(seed: int, size: int, digits: int = 3, ops: str = "+", reverse_answer: bool = True,
             split: str = "train", heldout_fraction: float = 0.05, fixed_width: bool = False,
             max_digits: int | None = None) -> Iterator[dict[str, Any]]:
    """Yield `size` problems `a op b =` with a, b drawn uniformly from [0, 10**digits).

    max_digits: draw each problem's digit count from `digits` + a geometric tail (P(d+1) = P(d) / 2),
    truncated at `max_digits`: most answers are short, a few are long, the long-tailed response lengths
    of real reasoning tasks in miniature (the async-vs-sync benchmark uses it).

    split: "train" or "test"; test problems are the `heldout_fraction` of all pairs that train never uses.
    fixed_width: write operands with leading zeros and the answer zero-padded to its largest width
    (`007+085=` -> `2900` reversed), so every digit sits at a fixed position: much easier for a tiny model.
    Subtraction keeps a >= b so answers are non-negative.
    """
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    if digits < 1 or digits > 18:
        raise ValueError(f"digits must be between 1 and 18, got {digits}")
    if max_digits is not None and not digits <= max_digits <= 18:
        raise ValueError(f"max_digits must be between digits ({digits}) and 18, got {max_digits}")
    unknown = set(ops) - set(_OPS)
    if not ops or unknown:
        raise ValueError(f"ops must be made of {''.join(_OPS)}, got {ops!r}")
    rng = random.Random(f"areal-arithmetic:{seed}:{split}")
    produced, seen = 0, set()
    while produced < size:
        op = rng.choice(ops)
        size_digits = digits
        while max_digits is not None and size_digits < max_digits and rng.random() < 0.5:
            size_digits += 1
        a, b = rng.randrange(10**size_digits), rng.randrange(10**size_digits)
        if op == "-" and a < b:
            a, b = b, a
        if _is_heldout(a, op, b, heldout_fraction) != (split == "test"):
            continue
        if split == "test":  # a held-out set counts each problem once
            if (a, op, b) in seen:
                continue
            seen.add((a, op, b))
        produced += 1
        width = (2 * size_digits if op == "*" else size_digits + 1) if fixed_width else 0
        shown = (str(a).zfill(size_digits), str(b).zfill(size_digits)) if fixed_width else (str(a), str(b))
        yield {
            "id": f"{a}{op}{b}",
            "question": f"{shown[0]}{op}{shown[1]}=",
            "reference": format_answer(_OPS[op](a, b), reverse_answer, width),
        }


def exact_match(sample: dict[str, Any], response: str, *, strip: bool = True,
                partial_credit: bool = False) -> RewardResult:
    """1.0 when the response equals the reference (surrounding whitespace ignored unless strip=False).

    partial_credit: a wrong answer of the right length scores the share of its characters that are
    right (a denser training signal); `correct` stays exact match either way.
    """
    reference = str(sample["reference"])
    answer = response.strip() if strip else response
    correct = answer == reference
    score = 1.0 if correct else 0.0
    if partial_credit and not correct and len(answer) == len(reference) and reference:
        score = sum(a == b for a, b in zip(answer, reference)) / len(reference)
    return RewardResult(score=score, correct=correct, details={"extracted": answer[:200], "reference": reference})


def latency(sample: dict[str, Any], response: str, median_s: float = 0.03, sigma: float = 1.5, cap_s: float = 3.0,
            latency_seed: int = 0) -> float:
    """Seconds the latency rewards wait: log-normal (median `median_s`, shape `sigma`) capped at `cap_s`,
    drawn from the sample and the response, so the same answer waits the same in every run and mode."""
    for name, value in (("median_s", median_s), ("cap_s", cap_s)):
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not value >= 0:
            raise ValueError(f"{name} must be a number of seconds >= 0, got {value!r}")
    if not isinstance(sigma, (int, float)) or isinstance(sigma, bool) or not sigma >= 0:
        raise ValueError(f"sigma must be a number >= 0, got {sigma!r}")
    key = f"{latency_seed}|{sample.get('id', sample.get('question', ''))}|{response}".encode()
    uniform = (int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") + 0.5) / 2**64
    return min(cap_s, median_s * math.exp(sigma * _NORMAL.inv_cdf(uniform))) if median_s > 0 else 0.0


async def exact_match_after_latency(sample: dict[str, Any], response: str, *, median_s: float = 0.03,
                                    sigma: float = 1.5, cap_s: float = 3.0, latency_seed: int = 0,
                                    **options: Any) -> RewardResult:
    """`exact_match` after an `asyncio.sleep` of `latency(...)` seconds (async: many wait at once)."""
    wait = latency(sample, response, median_s, sigma, cap_s, latency_seed)
    await asyncio.sleep(wait)
    return _with_latency(exact_match(sample, response, **options), wait)


def exact_match_after_blocking_latency(sample: dict[str, Any], response: str, *, median_s: float = 0.03,
                                       sigma: float = 1.5, cap_s: float = 3.0, latency_seed: int = 0,
                                       **options: Any) -> RewardResult:
    """`exact_match` after a `time.sleep` of the same latency: registered plain (one call at a time per
    worker, as every sync reward ran before) and io_bound (in threads), to compare the three."""
    wait = latency(sample, response, median_s, sigma, cap_s, latency_seed)
    time.sleep(wait)
    return _with_latency(exact_match(sample, response, **options), wait)


def _with_latency(result: RewardResult, wait: float) -> RewardResult:
    return RewardResult(score=result.score, correct=result.correct, details={**result.details, "latency_s": wait})


# Calls of arithmetic_latency one reward worker process runs at once: a step of the CPU demo scores 512
# answers, ~0.09 s each on average with the default tail; 256 waiting at once keep up with it on one worker.
LATENCY_CONCURRENCY = 256


@hookimpl
def register_rewards(register):
    register("arithmetic", exact_match, required_fields=("reference",),
             description="Exact match of the stripped response against `reference`.")
    latency_options = "options median_s (0.03), sigma (1.5), cap_s (3.0), latency_seed"
    register("arithmetic_latency", exact_match_after_latency, required_fields=("reference",),
             concurrency=LATENCY_CONCURRENCY,
             description=f"async: exact match after a log-normal wait, like a remote verifier ({latency_options})")
    register("arithmetic_latency_threads", exact_match_after_blocking_latency, required_fields=("reference",),
             io_bound=True, concurrency=32, description="io_bound: the same wait in a blocking call, run in threads")
    register("arithmetic_latency_serial", exact_match_after_blocking_latency, required_fields=("reference",),
             description="the same wait in a blocking call, one call at a time per worker (a plain reward)")


@hookimpl
def register_tools(register):
    from areal_arithmetic.calculator import calculator_after_latency

    register("calculator_latency", calculator_after_latency, version=__version__,
             description="the calculator behind a log-uniform wait (tool options min_s 0.05, max_s 0.5)")


@hookimpl
def register_generators(register):
    from areal_arithmetic.calculator import generate_calculator

    register("arithmetic", generate)
    register("calculator", generate_calculator)


def _task(name: str, description: str, split: str, size: int, seed: int, **options: Any) -> dict[str, Any]:
    return {
        "name": name,
        "description": description,
        "dataset": {"generator": "arithmetic", "seed": seed, "size": size,
                    "options": {"digits": 3, "ops": "+", "reverse_answer": True, "fixed_width": True,
                                "split": split, **options}},
        "prompt": {"template": "{{ question }}"},
        "reward": {"name": "arithmetic"},
        "eval": {"n": 1, "k": [1], "temperature": 0.0, "max_new_tokens": 20 if "max_digits" in options else 8},
    }


@hookimpl
def register_tasks(register):
    register(_task("arithmetic", "3-digit addition, zero-padded, answer digits reversed (training split)", "train", 20000, 0))
    register(_task("arithmetic-test", "3-digit addition, zero-padded, answer digits reversed (held-out split)", "test", 500, 0))
    longtail = {"digits": 2, "max_digits": 16}
    register(_task("arithmetic-longtail", "2- to 16-digit addition, digit count long-tailed (P(d+1) = P(d)/2), "
                   "answer reversed (training split)", "train", 20000, 0, **longtail))
    register({**_task("arithmetic-latency", "the demo task (3-digit addition) graded by arithmetic_latency: exact "
                      "match behind a long-tailed wait, like a remote verifier", "train", 20000, 0),
              "reward": {"name": "arithmetic_latency"}})
    from areal_arithmetic.calculator import TASKS

    for task in TASKS:
        register(task)
    register(_task("arithmetic-longtail-test", "2- to 16-digit addition, long-tailed digit count, answer reversed "
                   "(held-out split)", "test", 500, 0, **longtail))


def audit_variants(sample: dict[str, Any], rng: random.Random, options: dict[str, Any]) -> list[Any]:
    """`areal audit` mutators: the answer is the bare digits, so only surrounding whitespace is an
    equivalent form; every other change (a digit off, a digit more or less, the unreversed order, a sign,
    a hedge, two answers, prose around it) must be judged wrong."""
    from areal_core.audit import OUTSIDE, answer_variants, wrong

    reference = str(sample["reference"])
    digits = reference.lstrip("-")
    last = str((int(digits[-1]) + 1) % 10)
    first = str((int(digits[0]) + 1) % 10)
    wrongs = [(reference[:-1] + last, "last digit off by one"), (reference[0:len(reference) - len(digits)] + first
                                                                  + digits[1:], "first digit off by one"),
              (reference + "0", "one digit more"), ("-" + digits if not reference.startswith("-") else digits, "sign"),
              (reference[:-1] or "0" if len(reference) > 1 else reference + "1", "one digit less")]
    if digits[::-1] != digits:
        wrongs.append(((reference[:len(reference) - len(digits)]) + digits[::-1], "digits not reversed"))
    equivalents = [(f" {reference}\n", "surrounding whitespace"), (f"\t{reference}  ", "tabs and spaces around")]
    supersets = [(f"{reference}, {wrongs[0][0]}", "a list holding it"), (f"{reference} {wrongs[0][0]}", "two numbers")]
    variants = answer_variants(reference, wrongs, lambda answer: answer, equivalents=equivalents, supersets=supersets)
    variants.append(wrong(OUTSIDE, f"The answer is {reference}.", "the answer inside prose (the format is the bare digits)"))
    return variants


@hookimpl
def register_audit_mutators(register):
    register("arithmetic", audit_variants, description="digit near misses, hedges and several answers of the exact match")
