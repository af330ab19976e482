"""What a program inside the sandbox can see and do, the pool's reuse, the backends, and the errors."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from areal_sandbox import DockerUnavailableError, Execution, ImageMissingError, SandboxConfig, open_sandbox
from areal_sandbox.docker_backend import docker_client, list_containers
from areal_sandbox.image import WORK_DIR

MARKER = f"{WORK_DIR}/m"  # a file in the container's work dir: a reused container would still have it
from areal_sandbox.image import WORK_DIR
from sandbox_support import assert_host_clean, settle


def probe(pool, program: str) -> dict:
    """Run `program` (which prints one JSON object) in stdio mode and return what it printed."""
    result = pool.run(Execution(mode="stdio", program=program, cases=({"input": "", "output": ""},),
                                return_stdout=True))
    assert not result.error, result.error
    test = result.tests[0]
    assert test.verdict in ("wrong_answer", "passed"), (test.verdict, test.message, test.stderr)
    return json.loads(test.stdout)


def test_programs_run_unprivileged_without_capabilities(pool):
    facts = probe(pool, textwrap.dedent("""
        import json, os
        status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
        print(json.dumps({"uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(),
                          "cap_eff": status["CapEff"].strip(), "cap_bnd": status["CapBnd"].strip(),
                          "no_new_privs": status["NoNewPrivs"].strip()}))
    """))
    assert facts["uid"] == facts["euid"] == facts["gid"] == 10001
    assert int(facts["cap_eff"], 16) == 0 and int(facts["cap_bnd"], 16) == 0
    assert facts["no_new_privs"] == "1"


def test_root_filesystem_is_read_only_and_only_tmpfs_is_writable(pool):
    facts = probe(pool, textwrap.dedent("""
        import json
        out = {}
        for path in ("/usr/areal", "/opt/areal/harness/runner.py", "/etc/passwd", "WORK/ok", "/tmp/ok", "/dev/shm/ok"):
            try:
                with open(path, "a") as f:
                    f.write("x")
                out[path] = "written"
            except OSError as exc:
                out[path] = exc.strerror
        print(json.dumps(out))
    """).replace("WORK", WORK_DIR))
    assert facts["/usr/areal"] == "Read-only file system"
    assert facts["/opt/areal/harness/runner.py"] in ("Read-only file system", "Permission denied")
    assert facts["/etc/passwd"] in ("Read-only file system", "Permission denied")
    assert facts[f"{WORK_DIR}/ok"] == facts["/tmp/ok"] == facts["/dev/shm/ok"] == "written"


def test_the_host_environment_never_reaches_the_program(pool, monkeypatch):
    monkeypatch.setenv("AREAL_TEST_SECRET", "do-not-leak-0123")
    facts = probe(pool, "import json, os\nprint(json.dumps(dict(os.environ)))\n")
    assert "AREAL_TEST_SECRET" not in facts
    assert "do-not-leak-0123" not in json.dumps(facts)
    assert set(facts) <= {"PATH", "HOME", "TMPDIR", "LANG", "PYTHONIOENCODING", "LD_LIBRARY_PATH"}


def test_the_configured_limits_are_the_container_limits(pool):
    facts = probe(pool, textwrap.dedent("""
        import json, resource
        def read(*paths):
            for path in paths:
                try:
                    return open(path).read().strip()
                except OSError:
                    pass
        print(json.dumps({
            "memory": read("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"),
            "pids": read("/sys/fs/cgroup/pids.max", "/sys/fs/cgroup/pids/pids.max"),
            "cpu": read("/sys/fs/cgroup/cpu.max", "/sys/fs/cgroup/cpu/cpu.cfs_quota_us"),
            "period": read("/sys/fs/cgroup/cpu/cpu.cfs_period_us"),
            "address_space": resource.getrlimit(resource.RLIMIT_AS)[0],
        }))
    """))
    config = pool.config
    mib = 1024 * 1024
    expected_memory = (config.memory_mb + config.workdir_mb + config.tmp_mb + config.shm_mb + config.overhead_mb) * mib
    assert int(facts["memory"].split()[0]) == expected_memory
    assert int(facts["pids"]) == config.pids_limit
    quota, period = (facts["cpu"].split() + [facts["period"]])[:2]
    assert int(quota) / int(period) == config.cpus
    assert facts["address_space"] == config.memory_mb * mib


def test_no_host_directory_is_mounted(pool):
    facts = probe(pool, textwrap.dedent("""
        import json
        mounts = [line.split()[1] for line in open("/proc/self/mounts")]
        print(json.dumps({"mounts": mounts}))
    """))
    # Only what Docker always provides (proc, sys, dev, cgroups, /etc/hosts-style files) and our tmpfs.
    allowed_prefixes = ("/proc", "/sys", "/dev", "/etc/hostname", "/etc/hosts", "/etc/resolv.conf")
    unexpected = [m for m in facts["mounts"] if m not in ("/", "/work", "/tmp") and not m.startswith(allowed_prefixes)]
    assert unexpected == []


def test_the_supervisor_is_out_of_reach_of_the_program(pool):
    facts = probe(pool, textwrap.dedent("""
        import json, os
        out = {}
        for name, action in (("fd", lambda: os.listdir("/proc/1/fd")),
                             ("environ", lambda: open("/proc/1/environ").read()),
                             ("mem", lambda: open("/proc/1/mem", "rb").read(1)),
                             ("stdout", lambda: open("/proc/1/fd/1", "w"))):
            try:
                action()
                out[name] = "allowed"
            except OSError as exc:
                out[name] = exc.strerror
        print(json.dumps(out))
    """))
    assert set(facts.values()) == {"Permission denied"}, facts


def test_each_execution_starts_with_empty_work_directories(pool):
    writer = Execution(mode="function", program=textwrap.dedent("""
        for path in ("WORK/left", "/tmp/left", "/dev/shm/left"):
            open(path, "w").write("x")
        import os
        os.makedirs("WORK/deep/er", exist_ok=True)
        os.chmod("WORK/deep", 0o500)
        def f():
            return 1
    """).replace("WORK", WORK_DIR), tests=("assert f() == 1",))
    assert pool.run(writer).passed
    reader = Execution(mode="function",
                       program=f"import os\ndef left():\n    return os.listdir('{WORK_DIR}') + os.listdir('/tmp') + "
                               "os.listdir('/dev/shm')\n",
                       tests=("assert left() == [], left()",))
    result = pool.run(reader)
    assert result.passed, result


def test_the_pool_reuses_its_containers(pool, docker_engine):
    ids = settle(pool)
    for _ in range(3):
        assert pool.run(Execution(mode="function", program="def x():\n    return 1\n",
                                  tests=("assert x() == 1",))).passed
    assert settle(pool) == ids
    assert_host_clean(pool, docker_engine)


def test_stdio_cases_are_judged_one_by_one(pool):
    program = "n = int(input())\nprint(n * 2 if n != 3 else 7)\n"
    cases = tuple({"input": f"{n}\n", "output": f"{n * 2}\n"} for n in range(1, 6))
    result = pool.run(Execution(mode="stdio", program=program, cases=cases, stop_on_failure=False))
    assert [t.verdict for t in result.tests] == ["passed", "passed", "wrong_answer", "passed", "passed"]
    stopped = pool.run(Execution(mode="stdio", program=program, cases=cases, stop_on_failure=True))
    assert [t.verdict for t in stopped.tests] == ["passed", "passed", "wrong_answer", "skipped", "skipped"]


def test_runtime_errors_carry_truncated_stderr(pool):
    result = pool.run(Execution(mode="stdio",
                                program="import sys\nsys.stderr.write('e' * 30000)\nraise ValueError('boom')\n",
                                cases=({"input": "", "output": ""},)))
    test = result.tests[0]
    assert test.verdict == "runtime_error"
    assert "ValueError: boom" in test.stderr
    assert len(test.stderr) <= 2100


def test_the_run_backend_uses_a_fresh_container_and_removes_it(docker_engine, sandbox_image):
    config = SandboxConfig(backend="run", image=sandbox_image, timeout_s=5.0, total_timeout_s=10.0)
    with open_sandbox(config, client=docker_engine) as sandbox:
        found = f"import os\nexisted = os.path.exists('{MARKER}')\ndef marker():\n    return existed\n"
        first = sandbox.run(Execution(mode="function", program=found + f"open('{MARKER}', 'w')\n",
                                      tests=("assert not marker()",)))
        second = sandbox.run(Execution(mode="function", program=found, tests=("assert not marker()",)))
        assert first.passed and second.passed
        deadline = time.monotonic() + 20
        while list_containers(docker_engine, sandbox.pool_id) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert list_containers(docker_engine, sandbox.pool_id) == []


def test_containers_go_away_when_their_owner_is_killed(docker_engine, sandbox_image, tmp_path):
    """Even SIGKILL of the process holding a pool leaves no container behind (StdinOnce + AutoRemove)."""
    script = tmp_path / "owner.py"
    script.write_text(textwrap.dedent(f"""
        import os, signal, sys
        from areal_sandbox import SandboxConfig, open_sandbox
        pool = open_sandbox(SandboxConfig(image={sandbox_image!r}, pool_size=2), prewarm=True)
        print(pool.pool_id, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """))
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert run.returncode == -9, run.stderr
    pool_id = run.stdout.strip()
    assert pool_id
    deadline = time.monotonic() + 30
    while list_containers(docker_engine, pool_id) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert list_containers(docker_engine, pool_id) == []


def test_an_unreachable_engine_is_one_clear_error_with_the_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    with pytest.raises(DockerUnavailableError) as info:
        docker_client()
    message = str(info.value)
    assert "cannot reach the Docker engine" in message and "start-docker.sh" in message


def test_a_missing_image_is_one_clear_error_with_the_fix(docker_engine):
    with pytest.raises(ImageMissingError, match=r"areal sandbox build-image --tag areal-sandbox:no-such-tag"):
        open_sandbox(SandboxConfig(image="areal-sandbox:no-such-tag"), client=docker_engine)


def test_cli_status_reports_a_missing_image(areal, docker_engine):
    run = areal("sandbox", "status", "--image", "areal-sandbox:no-such-tag", env={"AREAL_PLUGINS": "sandbox"})
    assert run.returncode == 0, run.stderr
    assert "does not exist; build it with `areal sandbox build-image" in run.stdout


def test_cli_without_engine_fails_with_one_line(areal, tmp_path):
    run = areal("sandbox", "status", env={"AREAL_PLUGINS": "sandbox", "DOCKER_HOST": f"unix://{tmp_path}/none.sock"})
    assert run.returncode == 2
    assert run.stderr.startswith("error: cannot reach the Docker engine") and "Traceback" not in run.stderr


def test_cli_build_image_builds_a_usable_image(areal, docker_engine):
    tag = f"areal-sandbox-test:{os.getpid()}"
    try:
        run = areal("sandbox", "build-image", "--tag", tag, env={"AREAL_PLUGINS": "sandbox"}, timeout=600)
        assert run.returncode == 0, run.stderr
        assert run.stdout.startswith(f"built {tag}")
        with open_sandbox(SandboxConfig(image=tag, backend="run"), client=docker_engine) as sandbox:
            result = sandbox.run(Execution(mode="stdio", program="print(sum(map(int, input().split())))",
                                           cases=({"input": "2 3\n", "output": "5\n"},)))
        assert result.passed
    finally:
        try:
            docker_engine.images.remove(tag, force=True)
        except Exception:
            pass
