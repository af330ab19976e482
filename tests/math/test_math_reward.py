"""The `math` reward as the platform uses it: registered by the plugin, run by `areal score` in the reward
pool, options from the command line, and MathVerifier's hard timeout in a killable worker."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from areal_core.errors import ConfigError, InputError
from areal_core.rewards import reward_registry
from areal_core.rewards import call_reward
from areal_math import MathVerifier, check_options, math_reward, verify

HERMETIC = {"AREAL_PLUGINS": "math", "OMP_NUM_THREADS": "1"}
# A contrived reference whose numeric evaluation takes SymPy tens of seconds in this process; as an
# unordered list against three other values it is evaluated nine times.
SLOW_REFERENCE = ", ".join([r"\sin(\binom{e^{e}}{\binom{|\sqrt[2]{y}|}{\sqrt{n}\cdot e-i}})"] * 3)


def _rows(data_dir: Path, name: str) -> list[dict]:
    return [json.loads(line) for line in (data_dir / name / "test.jsonl").read_text().splitlines() if line.strip()]


def test_plugin_registers_the_math_reward_requiring_a_reference(areal) -> None:
    done = areal("plugins", "--json", env=HERMETIC)
    assert done.returncode == 0, done.stderr
    plugins = {p["name"]: p for p in json.loads(done.stdout)["plugins"]}
    assert plugins["math"]["error"] is None
    assert plugins["math"]["distribution"] == "areal-math"
    assert "reward:math" in plugins["math"]["provides"]


def test_areal_score_scores_a_file_of_real_responses(areal, data_dir: Path, tmp_path: Path) -> None:
    gsm = _rows(data_dir, "gsm8k")[0]
    m500 = _rows(data_dir, "math500")
    aime25 = _rows(data_dir, "aime25")[0]
    amc = _rows(data_dir, "amc23")[0]
    rows = [
        {"reference": gsm["answer"].split("####")[-1].strip(), "response": gsm["answer"]},  # the worked solution, ends "#### 18"
        {"reference": m500[0]["answer"], "response": m500[0]["solution"]},  # the reference solution, boxed
        {"reference": m500[1]["answer"], "response": m500[0]["solution"]},  # another problem's solution
        {"reference": aime25["answer"], "response": f"... so the answer is \\boxed{{{aime25['answer']}}}."},  # int reference
        {"reference": amc["answer"], "response": "Thus the final answer is 27."},  # float reference 27.0
        {"reference": "\\frac{1}{2}", "response": "I am not sure."},  # no answer at all
    ]
    source = tmp_path / "responses.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "scored.jsonl"
    done = areal("score", "--reward", "math", "--input", str(source), "--output", str(out), "--workers", "2",
                 "--timeout", "60", "--quiet", env=HERMETIC)
    assert done.returncode == 0, done.stderr
    assert "scored 6 rows with reward 'math': mean score 0.6667, correct 4/6, errors 0" in done.stdout
    scored = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["correct"] for r in scored] == [True, True, False, True, True, False]
    assert scored[0]["details"]["extracted_by"] == "gsm8k" and scored[0]["details"]["extracted"] == "18"
    assert scored[1]["details"]["extracted_by"] == "boxed"
    assert scored[5]["details"]["extracted"] is None and scored[5]["details"]["reason"] == "no answer found"


def test_areal_score_passes_options_to_the_verifier(areal, tmp_path: Path) -> None:
    rows = [{"reference": "18", "response": "The answer is 18."},
            {"reference": "\\frac{1}{3}", "response": "\\boxed{0.3333}"}]
    source = tmp_path / "responses.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    lenient = areal("score", "--reward", "math", "--input", str(source), "--quiet", env=HERMETIC)
    assert "correct 2/2" in lenient.stdout, lenient.stdout + lenient.stderr
    boxed_only = areal("score", "--reward", "math", "--input", str(source), "--option", "extract=boxed", "--quiet", env=HERMETIC)
    assert "correct 1/2" in boxed_only.stdout, boxed_only.stdout
    strict = areal("score", "--reward", "math", "--input", str(source), "--option", "strict=true", "--quiet", env=HERMETIC)
    assert "correct 1/2" in strict.stdout, strict.stdout


def test_an_unknown_option_is_an_error_naming_it(areal, tmp_path: Path) -> None:
    source = tmp_path / "responses.jsonl"
    source.write_text(json.dumps({"reference": "1", "response": "\\boxed{1}"}) + "\n")
    done = areal("score", "--reward", "math", "--input", str(source), "--option", "tolerance=0.1", "--quiet", env=HERMETIC)
    assert "errors 1" in done.stdout
    assert "unknown option(s) 'tolerance'" in done.stdout


def test_a_row_without_reference_is_rejected_before_scoring(areal, tmp_path: Path) -> None:
    source = tmp_path / "responses.jsonl"
    source.write_text(json.dumps({"response": "\\boxed{1}"}) + "\n")
    done = areal("score", "--reward", "math", "--input", str(source), env=HERMETIC)
    assert done.returncode == 2
    assert "missing field 'reference' required by reward 'math'" in done.stderr


def test_reward_function_is_the_registered_math_reward() -> None:
    spec = reward_registry().get("math")
    assert spec.fn is math_reward and spec.required_fields == ("reference",)
    result = call_reward(spec, {"reference": 27.0}, "\\boxed{27}", {})
    assert result.correct is True and result.details["reference"] == "27"


@pytest.mark.parametrize("reference, message", [
    ("", "reference is an empty string"),
    (None, "reference None is not an answer"),
    (float("nan"), "is not a finite number"),
    ([1, 2], "reference of type list is not an answer"),
])
def test_a_bad_reference_is_a_clear_input_error(reference, message: str) -> None:
    with pytest.raises(InputError, match=message):
        verify(reference, "\\boxed{1}")


@pytest.mark.parametrize("options, message", [
    ({"rel_tol": -1}, "rel_tol=-1: expected a number in \\[0, 1\\)"),
    ({"strict": "yes"}, "strict='yes': expected true or false"),
    ({"extract": "last"}, "extract='last': expected one of lenient, strict, auto, boxed, none"),
])
def test_a_bad_option_value_is_a_clear_config_error(options: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check_options(options)


def test_a_huge_tower_fails_fast_as_a_verifier_error() -> None:
    start = time.monotonic()
    result = verify("1", "\\boxed{2003^{2002^{2001}}}")
    assert result.error is not None and "too large to evaluate" in result.error
    assert result.correct is None and result.score == 0.0
    assert time.monotonic() - start < 5.0


@pytest.fixture
def hermetic_env(monkeypatch):
    for key, value in HERMETIC.items():
        monkeypatch.setenv(key, value)


def test_math_verifier_kills_a_verification_that_passes_its_timeout(hermetic_env) -> None:
    with MathVerifier(timeout=3.0) as verifier:
        assert verifier.verify("2", "\\boxed{2}").correct is True  # warm: imports done
        start = time.monotonic()
        result = verifier.verify(SLOW_REFERENCE, "\\boxed{1, 2, 3}")
        elapsed = time.monotonic() - start
        assert result.error == "reward 'math' timed out after 3s", result
        assert 3.0 <= elapsed < 3.0 + 10.0
        assert verifier.restarts == 1
        assert verifier.verify_many([("\\frac12", "\\boxed{0.5}"), ("3", "\\boxed{4}")])[0].correct is True


def test_math_verifier_checks_its_options_in_the_caller() -> None:
    with pytest.raises(ConfigError, match="unknown option"):
        MathVerifier(timeout=1.0, rtol=0.1)
