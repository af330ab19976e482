"""The `areal sandbox ...` commands and the `python` tool (registered through the `register_commands` and
`register_tools` hooks)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from areal_core import hookimpl


@hookimpl
def register_commands(cli: click.Group) -> None:
    cli.add_command(sandbox_group)


@hookimpl
def register_tools(register) -> None:
    from areal_sandbox import __version__
    from areal_sandbox.image import harness_hash
    from areal_sandbox.tool import python_tool, tool_config

    register("python", python_tool, description="run a Python program in the Docker sandbox; returns what it printed",
             version=f"{__version__}+{harness_hash()[:12]}", check=tool_config)


@click.group("sandbox")
def sandbox_group() -> None:
    """The local Docker sandbox that runs untrusted code (code rewards)."""


@sandbox_group.command("build-image")
@click.option("--tag", default="areal-sandbox:latest", show_default=True, help="Name:tag of the image to build.")
@click.option("--python", "python", default=sys.executable, show_default=True,
              help="Interpreter whose files make up the image (offline build).")
@click.option("--package", "packages", multiple=True,
              help="Pure-Python package importable by --python to add to the image (repeatable; "
                   "default: sortedcontainers).")
@click.option("--from-registry", "base", default=None, metavar="IMAGE",
              help="Build with a Dockerfile FROM this image instead (e.g. python:3.11-slim; needs a registry).")
def build_image_command(tag: str, python: str, packages: tuple[str, ...], base: str | None) -> None:
    """Build the runner image. By default offline: from this machine's Python, loaded with `docker import`."""
    from areal_sandbox.docker_backend import docker_client
    from areal_sandbox.image import DEFAULT_EXTRA_PACKAGES, build_image_from_registry, build_image_offline

    client = docker_client()
    extra = packages or DEFAULT_EXTRA_PACKAGES
    log = lambda message: click.echo(f"  {message}", err=True)  # noqa: E731
    if base:
        built = build_image_from_registry(client, tag, base, extra, log)
    else:
        built = build_image_offline(client, tag, python, extra, log)
    click.echo(f"built {built.tag} ({built.image_id[7:19]}, {built.size_bytes / 1e6:.0f} MB, Python {built.python}, "
               f"harness {built.harness}) by {built.method}")


@sandbox_group.command("status")
@click.option("--image", default="areal-sandbox:latest", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
def status_command(image: str, as_json: bool) -> None:
    """Is the engine reachable, is the image built and current, which sandbox containers exist."""
    from areal_sandbox.docker_backend import check_image, docker_client, list_containers
    from areal_sandbox.errors import SandboxError
    from areal_sandbox.image import harness_hash

    client = docker_client()
    version = client.version().get("Version", "?")
    try:
        check_image(client, image)
        image_state = "ok"
    except SandboxError as exc:
        image_state = str(exc)
    containers = [{"id": c.id[:12], "status": c.status, "owner": c.labels.get("areal.sandbox.owner", "")}
                  for c in list_containers(client)]
    if as_json:
        click.echo(json.dumps({"engine": version, "image": image, "image_state": image_state,
                               "harness": harness_hash(), "containers": containers}, indent=2))
        return
    click.echo(f"engine: Docker {version}")
    click.echo(f"image: {image}: {image_state}")
    click.echo(f"sandbox containers: {len(containers)}")
    for c in containers:
        click.echo(f"  {c['id']} {c['status']} (owner {c['owner']})")


@sandbox_group.command("prune")
def prune_command() -> None:
    """Remove every sandbox container (e.g. after a crashed run on an engine without auto-remove)."""
    from areal_sandbox.docker_backend import docker_client, list_containers

    client = docker_client()
    removed = 0
    for container in list_containers(client):
        try:
            container.remove(force=True)
            removed += 1
        except Exception as exc:  # already being removed
            click.echo(f"  {container.id[:12]}: {exc}", err=True)
    click.echo(f"removed {removed} sandbox container(s)")


@sandbox_group.command("run")
@click.argument("program", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--input", "input_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="File fed to the program's stdin (stdio mode).")
@click.option("--expect", "expect_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Expected stdout (stdio mode); without it the output is only shown.")
@click.option("--tests", "tests_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Python file with test statements (function mode): each top-level statement is one test.")
@click.option("--image", default="areal-sandbox:latest", show_default=True)
@click.option("--timeout", default=10.0, show_default=True, type=click.FloatRange(min=0, min_open=True))
@click.option("--memory-mb", default=512, show_default=True, type=click.IntRange(16))
def run_command(program: Path, input_path: Path | None, expect_path: Path | None, tests_path: Path | None,
                image: str, timeout: float, memory_mb: int) -> None:
    """Run PROGRAM once in a fresh sandbox container and print the verdicts."""
    import ast

    from areal_sandbox.docker_backend import open_sandbox
    from areal_sandbox.types import Execution, SandboxConfig

    config = SandboxConfig(backend="run", image=image, timeout_s=timeout, total_timeout_s=max(timeout * 2, 10.0),
                           memory_mb=memory_mb)
    source = program.read_text()
    if tests_path is not None:
        text = tests_path.read_text()
        statements = tuple(ast.get_source_segment(text, node) or "" for node in ast.parse(text).body)
        execution = Execution(mode="function", program=source, tests=statements)
    else:
        case = {"input": input_path.read_text() if input_path else "",
                "output": expect_path.read_text() if expect_path else ""}
        execution = Execution(mode="stdio", program=source, cases=(case,), return_stdout=expect_path is None)
    with open_sandbox(config) as sandbox:
        result = sandbox.run(execution)
    if result.error:
        raise click.ClickException(f"the sandbox failed: {result.error}")
    for test in result.tests:
        verdict = test.verdict
        if tests_path is None and expect_path is None and verdict == "wrong_answer":
            verdict, message = "ran (no --expect given)", ""
        else:
            message = test.message
        click.echo(f"{test.name}: {verdict}" + (f" - {message}" if message else ""))
        if test.stdout:
            click.echo(test.stdout.rstrip())
        if test.stderr:
            click.echo(test.stderr.rstrip(), err=True)
    click.echo(f"{sum(t.passed for t in result.tests)}/{len(result.tests)} passed in {result.wall_s:.3f}s")
