"""Time limits are CPU time: a right program is not failed because the machine around it is busy.

A training run always loads its machine (the trainer, the engine, other rewards' programs), so a
wall-clock limit would turn load into wrong rewards. These tests keep the cores busy with other
containers (Docker shares CPU between containers, so busy processes on the host alone slow a
container less) while a program that needs a known amount of CPU time runs: under a wall-clock
limit its cases and its execution would time out; counted in CPU time they pass.
"""
from __future__ import annotations

import os
import time

import pytest

from areal_sandbox import Execution, SandboxConfig, open_sandbox

# Spins until this process has used SECONDS of CPU time, whatever the wall clock says.
SPIN = "import time\nwhile time.process_time() < {seconds}:\n    pass\nprint('done')\n"
HOGS = 2 * (os.cpu_count() or 1)  # busy containers of one CPU each: the program gets a share


@pytest.fixture
def loaded_machine(docker_engine, sandbox_image):
    hogs = []
    try:
        for _ in range(HOGS):
            hogs.append(docker_engine.containers.run(
                sandbox_image, ["/usr/local/bin/python3", "-c", "while True:\n    pass\n"], detach=True,
                network_mode="none", nano_cpus=int(1e9), labels={"areal-test": "cpu-hog"}))
        time.sleep(0.5)
        yield
    finally:
        for hog in hogs:
            hog.remove(force=True)


def test_cases_under_load_are_judged_by_their_cpu_time_not_the_clock(docker_engine, sandbox_image, loaded_machine):
    config = SandboxConfig(image=sandbox_image, pool_size=1, timeout_s=1.0, total_timeout_s=2.5, wall_factor=6.0,
                           cpus=1.0)
    cases = tuple({"input": "", "output": "done"} for _ in range(3))
    with open_sandbox(config, client=docker_engine) as sandbox:
        started = time.monotonic()
        result = sandbox.run(Execution(mode="stdio", program=SPIN.format(seconds=0.6), cases=cases))
        wall = time.monotonic() - started
    assert result.passed, [(t.verdict, t.message, t.time_s, t.cpu_s) for t in result.tests]
    # The load was real: the cases together took longer on the clock than the execution's limit,
    # and at least one took longer than a case's; each used its 0.6 s of CPU time
    # (counted in clock ticks).
    assert wall > config.total_timeout_s, wall
    assert max(t.time_s for t in result.tests) > config.timeout_s, [t.time_s for t in result.tests]
    assert all(0.55 <= t.cpu_s < config.timeout_s for t in result.tests), [t.cpu_s for t in result.tests]


def test_a_function_run_under_load_is_judged_by_its_cpu_time(docker_engine, sandbox_image, loaded_machine):
    config = SandboxConfig(image=sandbox_image, pool_size=1, timeout_s=1.5, total_timeout_s=3.0, wall_factor=6.0,
                           cpus=1.0)
    program = "import time\ndef spin():\n    while time.process_time() < 1.0:\n        pass\n    return 'done'\n"
    with open_sandbox(config, client=docker_engine) as sandbox:
        result = sandbox.run(Execution(mode="function", program=program, tests=("assert spin() == 'done'",)))
    test = result.tests[0]
    assert result.passed, (test.verdict, test.message, test.time_s, test.cpu_s)
    assert test.time_s > config.timeout_s and 0.95 <= test.cpu_s < config.timeout_s, (test.time_s, test.cpu_s)


def test_the_cpu_time_of_every_case_counts_against_the_execution(docker_engine, sandbox_image):
    config = SandboxConfig(image=sandbox_image, pool_size=1, timeout_s=2.0, total_timeout_s=1.5, wall_factor=3.0)
    cases = tuple({"input": "", "output": "done"} for _ in range(4))
    with open_sandbox(config, client=docker_engine) as sandbox:
        result = sandbox.run(Execution(mode="stdio", program=SPIN.format(seconds=0.6), cases=cases,
                                       stop_on_failure=False))
    verdicts = [t.verdict for t in result.tests]
    # 0.6 s and 0.6 s fit in 1.5 s; the third case runs out of the execution's CPU time, the fourth
    # never starts (it would have run after a failure: stop_on_failure is off).
    assert verdicts == ["passed", "passed", "timeout", "timeout"], [(t.verdict, t.message) for t in result.tests]
    assert result.tests[2].message == "the execution's 1.5s of CPU time (all runs together) ran out"
    assert result.tests[3].message == "not run: the total time limit was reached"
    assert sum(t.cpu_s for t in result.tests[:3]) >= config.total_timeout_s


def test_a_wall_factor_below_one_is_refused():
    with pytest.raises(ValueError, match="wall_factor must be >= 1"):
        SandboxConfig(wall_factor=0.5).validate()
