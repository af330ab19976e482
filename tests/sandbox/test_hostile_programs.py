"""Hostile programs against the real Docker sandbox.

Every program here tries to pass a test it cannot pass honestly, or to harm the machine. Each must
score 0 within its time limit, and afterwards the host must be unchanged: no file it wrote outside
the container, no surviving process, no leaked container, and the pool must still judge an honest
program correctly.
"""
from __future__ import annotations

import socket
import threading
import time
import uuid

import pytest

from areal_sandbox import Execution
from areal_sandbox.image import WORK_DIR
from sandbox_support import assert_host_clean, settle

HONEST = Execution(mode="function", program="def f(x):\n    return x + 1\n", tests=("assert f(1) == 2",))


def run_hostile(pool, program: str, tests=("assert f(1) == 2",)):
    started = time.monotonic()
    result = pool.run(Execution(mode="function", program=program, tests=tests))
    elapsed = time.monotonic() - started
    assert not result.error, result.error
    assert not result.passed and result.fraction_passed == 0.0, result
    # Within the time limit (on the wall clock, for programs that sleep) plus the cost of starting
    # and cleaning up.
    assert elapsed < pool.config.timeout_s * pool.config.wall_factor + 3.0, f"took {elapsed:.1f}s"
    return result


def verdicts(result) -> set[str]:
    return {t.verdict for t in result.tests}


def assert_pool_still_judges_honestly(pool, client) -> None:
    assert_host_clean(pool, client)
    assert pool.run(HONEST).passed


def test_infinite_loop_times_out(spin_pool, docker_engine):
    result = run_hostile(spin_pool, "while True:\n    pass\n")
    assert verdicts(result) == {"timeout"}
    assert result.tests[0].message == f"used more than {spin_pool.config.timeout_s:g}s of CPU time"
    assert result.tests[0].cpu_s >= spin_pool.config.timeout_s
    assert_pool_still_judges_honestly(spin_pool, docker_engine)


def test_sleep_times_out(pool, docker_engine):
    started = time.monotonic()
    result = run_hostile(pool, "import time\ntime.sleep(3600)\n")
    assert verdicts(result) == {"timeout"}
    wall_limit = pool.config.timeout_s * pool.config.wall_factor
    assert result.tests[0].message == f"no exit within {wall_limit:g}s of wall-clock time"
    assert time.monotonic() - started >= wall_limit
    assert result.tests[0].cpu_s < 1.0
    assert_pool_still_judges_honestly(pool, docker_engine)


def test_fork_bomb_is_contained_by_the_pids_limit_and_killed(pool, docker_engine):
    program = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    result = run_hostile(pool, program)
    assert verdicts(result) <= {"timeout", "runtime_error"}
    assert_pool_still_judges_honestly(pool, docker_engine)


def test_memory_bomb_gets_memory_limit(pool, docker_engine):
    result = run_hostile(pool, "blocks = []\nwhile True:\n    blocks.append(bytearray(8 << 20))\n")
    assert verdicts(result) == {"memory_limit"}
    assert_pool_still_judges_honestly(pool, docker_engine)


def test_memory_bomb_in_many_processes_is_stopped(pool, docker_engine):
    program = ("import os\nfor _ in range(8):\n    if os.fork() == 0:\n        break\n"
               "blocks = []\nwhile True:\n    blocks.append(bytearray(8 << 20))\n")
    result = run_hostile(pool, program)
    assert verdicts(result) & {"memory_limit", "timeout", "runtime_error"}
    assert_pool_still_judges_honestly(pool, docker_engine)


def test_stdout_flood_gets_output_limit_quickly(pool, docker_engine):
    started = time.monotonic()
    result = run_hostile(pool, "while True:\n    print('x' * 4096)\n")
    assert verdicts(result) == {"output_limit"}
    assert time.monotonic() - started < pool.config.timeout_s  # killed at the cap, not at the timeout
    assert_pool_still_judges_honestly(pool, docker_engine)


def test_disk_fill_stops_at_the_tmpfs_size(pool, docker_engine):
    program = ("import os\ni = 0\nwhile True:\n"
               f"    with open(f'{WORK_DIR}/fill{{i}}', 'wb') as f:\n        f.write(b'x' * (1 << 20))\n    i += 1\n")
    result = run_hostile(pool, program)
    assert verdicts(result) == {"runtime_error"}
    assert "No space left" in result.tests[0].message
    # The next program finds an empty work directory.
    check = pool.run(Execution(mode="function", program="import os\ndef left():\n    return os.listdir('/work')\n",
                               tests=("assert left() == []",)))
    assert check.passed, check
    assert_pool_still_judges_honestly(pool, docker_engine)


def test_network_egress_reaches_nothing(pool, docker_engine):
    """A listener on the host's loopback would be reachable from a container on the host network;
    the sandbox has none (only its own loopback interface) and no name resolution."""
    accepted = []
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(5)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    stop = threading.Event()

    def accept():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                accepted.append(conn)
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    program = (
        "import os, socket\n"
        "reached = []\n"
        f"for host in ('127.0.0.1', 'localhost', 'host.docker.internal'):\n"
        "    try:\n"
        f"        socket.create_connection((host, {port}), timeout=1).close()\n"
        "        reached.append(host)\n"
        "    except OSError:\n"
        "        pass\n"
        "interfaces = sorted(os.listdir('/sys/class/net'))\n"
        "def f(x):\n"
        "    return x + 1 if reached or interfaces != ['lo'] else 0\n"
    )
    try:
        result = run_hostile(pool, program)
    finally:
        stop.set()
        thread.join(2)
        server.close()
    assert verdicts(result) == {"wrong_answer"}  # f returned 0: no connection, only `lo`
    assert accepted == []
    assert_pool_still_judges_honestly(pool, docker_engine)


def test_writes_to_host_paths_never_reach_the_host(pool, docker_engine, tmp_path):
    marker = tmp_path / f"from-sandbox-{uuid.uuid4().hex}"
    targets = [str(marker), f"/tmp/{marker.name}", "/etc/areal-owned", "/usr/lib/areal-owned", "/root/areal-owned"]
    program = (
        "import os\n"
        f"for path in {targets!r}:\n"
        "    try:\n"
        "        os.makedirs(os.path.dirname(path), exist_ok=True)\n"
        "        open(path, 'w').write('owned')\n"
        "    except OSError:\n"
        "        pass\n"
        "def f(x):\n"
        "    return 0\n"
    )
    result = run_hostile(pool, program)
    assert verdicts(result) == {"wrong_answer"}
    for path in targets:
        assert not __import__("os").path.exists(path), f"the sandbox wrote {path} on the host"
    assert_pool_still_judges_honestly(pool, docker_engine)


def test_killing_the_parent_and_everything_else_fails_and_harms_nothing(pool, docker_engine):
    ids_before = pool.container_ids()
    program = (
        "import os, signal\n"
        "for pid in (os.getppid(), 1, -1):\n"
        "    for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGSTOP):\n"
        "        try:\n"
        "            os.kill(pid, sig)\n"
        "        except OSError:\n"
        "            pass\n"
        "os._exit(0)\n"
    )
    result = run_hostile(pool, program)
    assert verdicts(result) == {"runtime_error"}
    assert_pool_still_judges_honestly(pool, docker_engine)
    assert pool.container_ids() == ids_before  # PID 1 survived: the same container keeps serving


def test_setsid_child_that_outlives_the_timeout_is_killed(pool, docker_engine):
    program = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"  # a daemon: new session, parent gone, reparented to PID 1
        "        time.sleep(2.5)\n"
        "        open('/tmp/daemon-survived', 'w').write('yes')\n"
        "        time.sleep(3600)\n"
        "    os._exit(0)\n"
        "time.sleep(3600)\n"
    )
    result = run_hostile(pool, program)
    assert verdicts(result) == {"timeout"}
    time.sleep(1.0)  # past the moment the daemon would have written its file
    check = pool.run(Execution(
        mode="function",
        program=("import os\n"
                 "def others():\n"  # every process but this one and the harness (PID 1, the tests' process)
                 "    return [p for p in os.listdir('/proc') if p.isdigit() and int(p) != os.getpid()\n"
                 "            and b'supervisor.py' not in open(f'/proc/{p}/cmdline', 'rb').read()]\n"
                 "def survived():\n    return os.path.exists('/tmp/daemon-survived')\n"),
        tests=("assert others() == []", "assert not survived()")))
    assert check.passed, check
    assert_pool_still_judges_honestly(pool, docker_engine)


@pytest.mark.parametrize("exit_call", ["import sys\nsys.exit(0)", "import os\nos._exit(0)", "exit()",
                                       "raise SystemExit(0)",
                                       "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"])
def test_exit_before_the_asserts_ran_fails(pool, docker_engine, exit_call):
    result = run_hostile(pool, exit_call + "\n")
    assert verdicts(result) == {"runtime_error"}
    assert_pool_still_judges_honestly(pool, docker_engine)


def test_exit_inside_the_candidate_fails_the_tests_it_skipped(pool, docker_engine):
    program = "import os\ndef f(x):\n    if x == 2:\n        os._exit(0)\n    return x + 1\n"
    result = pool.run(Execution(mode="function", program=program,
                                tests=("assert f(1) == 2", "assert f(2) == 3", "assert f(3) == 4")))
    assert [t.verdict for t in result.tests] == ["passed", "runtime_error", "runtime_error"]
    assert not result.passed
    assert_pool_still_judges_honestly(pool, docker_engine)


def test_a_harmed_container_is_replaced(pool, docker_engine):
    """SysV shared memory outlives its creator; the supervisor cannot vouch for the container, so
    the pool throws it away and starts a fresh one."""
    before = pool.container_ids()
    replaced = pool.replaced
    program = (
        "import ctypes\nlibc = ctypes.CDLL(None)\n"
        "segment = libc.shmget(0, 1 << 20, 0o1000 | 0o600)\n"  # IPC_PRIVATE, IPC_CREAT
        "def f(x):\n    return segment\n"
    )
    result = pool.run(Execution(mode="function", program=program, tests=("assert f(1) == 2",)))
    assert result.harmed and result.problems and not result.passed
    after = settle(pool)
    assert pool.replaced == replaced + 1
    assert set(after).isdisjoint(before)
    assert_pool_still_judges_honestly(pool, docker_engine)
