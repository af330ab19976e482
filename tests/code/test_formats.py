"""Turning samples of each data set into sandbox executions (no Docker needed)."""
from __future__ import annotations

import base64
import json
import pickle

import pytest

from areal_code.formats import (
    detect_format,
    humaneval_execution,
    humaneval_program,
    leetcode_execution,
    mbpp_execution,
    stdio_cases,
    stdio_execution,
)
from areal_core.errors import InputError


def test_formats_are_detected_from_real_samples(humaneval, mbpp, leetcode, code_contests, codeforces):
    assert detect_format(humaneval[0]) == "humaneval"
    assert detect_format(mbpp[0]) == "mbpp"
    assert detect_format(leetcode[0]) == "leetcode"
    assert detect_format(code_contests[0]) == "stdio"
    assert detect_format(codeforces[0]) == "stdio"


def test_an_unrecognisable_sample_names_its_fields_and_the_option():
    with pytest.raises(InputError, match=r"fields \(answer, question\).*format="):
        detect_format({"question": "q", "answer": "a"})


def test_humaneval_completion_forms(humaneval):
    sample = humaneval[0]
    body = sample["canonical_solution"]
    assert humaneval_program(sample["prompt"], body, sample["entry_point"]) == sample["prompt"] + body
    full = f"def {sample['entry_point']}(numbers, threshold):\n{body}"
    program = humaneval_program(sample["prompt"], full, sample["entry_point"])
    assert program.startswith(sample["prompt"].rstrip("\n")) and program.endswith(full)
    execution = humaneval_execution(sample, body, {})
    assert (execution.mode, execution.candidate, execution.check) == ("function", "has_close_elements", sample["test"])


def test_mbpp_tests_and_setup(mbpp):
    sample = next(s for s in mbpp if s["test_imports"])
    execution = mbpp_execution(sample, sample["code"], {})
    assert execution.tests == tuple(sample["test_list"])
    assert sample["test_imports"][0] in execution.setup


def test_leetcode_runs_after_the_usual_imports(leetcode):
    execution = leetcode_execution(leetcode[0], leetcode[0]["solutions"], {})
    assert "from typing import *" in execution.prelude and execution.check == leetcode[0]["tests"]["functional"]
    assert leetcode_execution(leetcode[0], "x", {"prelude": ""}).prelude == ""


def test_stdio_cases_from_every_shape(code_contests, codeforces):
    contest = stdio_cases(code_contests[0])  # a JSON string of {"input": {"stdin"}, "output": {"stdout"}}
    assert len(contest) == len(json.loads(code_contests[0]["test"]))
    assert contest[0] == {"input": json.loads(code_contests[0]["test"])[0]["input"]["stdin"],
                          "output": json.loads(code_contests[0]["test"])[0]["output"]["stdout"]}
    assert stdio_cases(codeforces[0]) == codeforces[0]["tests"]
    assert stdio_cases({"input_output": json.dumps({"inputs": ["1\n"], "outputs": ["2\n"]})}) == [
        {"input": "1\n", "output": "2\n"}]
    assert len(stdio_execution(code_contests[0], "x", {"max_cases": 5}).cases) == 5


def test_task_data_is_never_unpickled():
    payload = base64.b64encode(pickle.dumps([{"input": "1", "output": "1"}])).decode()
    with pytest.raises(InputError, match="must be a non-empty list of test cases"):
        stdio_cases({"tests": payload})


@pytest.mark.parametrize("sample, message", [
    ({"tests": "[1, 2"}, "looks like JSON but does not parse"),
    ({"tests": [{"input": "1"}]}, "case 0 of field 'tests' needs 'input' and 'output'"),
    ({"tests": {"inputs": ["1"], "outputs": []}}, "has 1 inputs but 0 outputs"),
    ({"tests": []}, "must be a non-empty list"),
])
def test_malformed_stdio_tests_are_named(sample, message):
    with pytest.raises(InputError, match=message):
        stdio_cases(sample)


def test_missing_fields_are_named():
    with pytest.raises(InputError, match="no field 'entry_point'"):
        humaneval_execution({"prompt": "p", "test": "t"}, "x", {})
    with pytest.raises(InputError, match="'test_list' must be a non-empty list"):
        mbpp_execution({"test_list": "assert f()"}, "x", {})
