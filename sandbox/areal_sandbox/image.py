"""Build the sandbox runner image.

Offline (the default, no registry needed): a root filesystem is assembled from a Python interpreter
on this machine, the shared libraries it and its extension modules load (found with ``ldd``), its
standard library (without tests, IDLE, Tk and its site-packages), a few pure-Python packages that
solutions commonly use, and the harness; it is loaded with ``docker import``. Nothing else is in it:
no shell, no package manager, no setuid file.

With a registry (``--from-registry``): a Dockerfile on top of an official ``python:X.Y-slim`` image.

Both images run the harness as PID 1 under an unprivileged user and record the harness hash in
``AREAL_HARNESS_HASH``; the sandbox refuses an image whose hash differs from the installed harness.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from areal_sandbox.errors import ImageBuildError

HARNESS_DIR = Path(__file__).parent / "harness"
HARNESS_FILES = ("__init__.py", "compare.py", "judge.py", "prepare.py", "runner.py", "supervisor.py", "wire.py")
IMAGE_HARNESS_DIR = "/opt/areal/harness"
IMAGE_PYTHON_PREFIX = "/opt/python"
SANDBOX_UID = 10001
WORK_DIR = "/work"  # the writable tmpfs the program runs in, inside the container
PYTHON_LINK = "/usr/local/bin/python3"
SUPERVISOR_CMD = [PYTHON_LINK, "-I", "-B", f"{IMAGE_HARNESS_DIR}/supervisor.py"]
DEFAULT_EXTRA_PACKAGES = ("sortedcontainers",)
# Parts of the standard library a sandboxed solution never needs.
STDLIB_EXCLUDE = {"test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "site-packages",
                  "dist-packages", "pydoc_data", "venv"}
# Extension modules left out with the libraries they pull in (Tk and X11, curses, test modules).
DYNLOAD_EXCLUDE = ("_tkinter", "_test", "_ctypes_test", "_xxtestfuzz", "_xxsubinterpreters", "xxlimited",
                   "_curses", "readline", "nis", "ossaudiodev", "spwd")


def harness_hash() -> str:
    """A short hash of the harness files; changes whenever the code run inside the image does."""
    digest = hashlib.sha256()
    for name in HARNESS_FILES:
        digest.update(name.encode() + b"\0" + (HARNESS_DIR / name).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class BuiltImage:
    tag: str
    image_id: str
    harness: str
    python: str
    size_bytes: int
    method: str


_INTERPRETER_PROBE = r"""
import json, os, sys, sysconfig
print(json.dumps({
    "executable": os.path.realpath(sys.executable),
    "version": "%d.%d" % sys.version_info[:2],
    "full_version": sys.version.split()[0],
    "stdlib": sysconfig.get_paths()["stdlib"],
    "dynload": sysconfig.get_config_var("DESTSHARED")
               or os.path.join(sysconfig.get_paths()["stdlib"], "lib-dynload"),
    "libdir": sysconfig.get_config_var("LIBDIR") or "",
    "shared": bool(sysconfig.get_config_var("Py_ENABLE_SHARED")),
}))
"""

_PACKAGE_PROBE = r"""
import importlib.util, json, os, sys
found = {}
for name in sys.argv[1:]:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.origin:
        continue
    origin = spec.origin
    found[name] = os.path.dirname(origin) if origin.endswith("__init__.py") else origin
print(json.dumps(found))
"""

_LDD_LINE = re.compile(r"^\s*(?:(\S+)\s+=>\s+)?(/\S+)\s+\(0x[0-9a-f]+\)\s*$")


def _ldd(path: str) -> list[str]:
    """Absolute paths of the shared libraries `path` loads (the dynamic loader included)."""
    try:
        out = subprocess.run(["ldd", path], capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise ImageBuildError("`ldd` is not installed; it is needed to find the interpreter's libraries "
                              "(apt-get install libc-bin)") from None
    if out.returncode != 0:
        return []  # not dynamic (e.g. a static module)
    libs = []
    for line in out.stdout.splitlines():
        match = _LDD_LINE.match(line)
        if match:
            libs.append(match.group(2))
    return libs


def _probe_python(python: str) -> dict:
    try:
        out = subprocess.run([python, "-I", "-c", _INTERPRETER_PROBE], capture_output=True, text=True, timeout=60)
    except OSError as exc:
        raise ImageBuildError(f"--python {python}: cannot run it ({exc.strerror})") from None
    if out.returncode != 0:
        raise ImageBuildError(f"--python {python}: probing the interpreter failed: {out.stderr.strip()[-500:]}")
    return json.loads(out.stdout)


class _RootFS:
    """A staging directory that becomes the image's root filesystem."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, image_path: str) -> Path:
        return self.root / image_path.lstrip("/")

    def mkdir(self, image_path: str, mode: int = 0o755) -> None:
        target = self.path(image_path)
        target.mkdir(parents=True, exist_ok=True)
        target.chmod(mode)

    def copy_file(self, source: str | Path, image_path: str) -> None:
        target = self.path(image_path)
        if target.exists():
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(os.path.realpath(source), target)  # dereferences links: the image gets the file
        mode = target.stat().st_mode
        target.chmod((mode & 0o755) | 0o444)  # readable by all, no setuid/setgid/sticky, no world-write

    def copy_tree(self, source: str | Path, image_path: str, skip: Callable[[Path], bool] = lambda p: False) -> None:
        source = Path(source)
        for dirpath, dirnames, filenames in os.walk(source):
            rel = Path(dirpath).relative_to(source)
            dirnames[:] = [d for d in dirnames if not skip(rel / d)]
            self.mkdir(f"{image_path}/{rel}" if str(rel) != "." else image_path)
            for name in filenames:
                if skip(rel / name) or name.endswith((".exe", ".pdb")):
                    continue
                src = Path(dirpath) / name
                if src.is_symlink() and not src.exists():
                    continue
                self.copy_file(src, f"{image_path}/{rel / name}")

    def write(self, image_path: str, text: str, mode: int = 0o644) -> None:
        target = self.path(image_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        target.chmod(mode)

    def symlink(self, target: str, image_path: str) -> None:
        link = self.path(image_path)
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(target)


def _add_libraries(fs: _RootFS, binaries: Iterable[str], private_libdir: str, private_dirs: tuple[str, ...]) -> None:
    """Copy each binary's libraries: system ones keep their paths, the interpreter's own (e.g.
    libpython in the interpreter's prefix) go to `private_libdir`, found through LD_LIBRARY_PATH."""
    for binary in binaries:
        for lib in _ldd(binary):
            if any(lib.startswith(d.rstrip("/") + "/") for d in private_dirs):
                fs.copy_file(lib, f"{private_libdir}/{os.path.basename(lib)}")
            else:
                fs.copy_file(lib, lib)


def assemble_rootfs(root: Path, python: str = sys.executable,
                    extra_packages: Iterable[str] = DEFAULT_EXTRA_PACKAGES,
                    log: Callable[[str], None] = lambda s: None) -> dict:
    """Fill `root` with the runner image's files; returns facts about what went in."""
    info = _probe_python(python)
    fs = _RootFS(root)
    version = info["version"]
    prefix = IMAGE_PYTHON_PREFIX
    stdlib_dest = f"{prefix}/lib/python{version}"
    log(f"interpreter {info['executable']} (Python {info['full_version']})")

    for d in ("/bin", "/dev", "/etc", "/proc", "/sys", "/tmp", WORK_DIR, "/usr/local/bin", f"{prefix}/bin",
              f"{prefix}/lib", IMAGE_HARNESS_DIR):
        fs.mkdir(d, 0o1777 if d in ("/tmp", WORK_DIR) else 0o755)
    fs.copy_file(info["executable"], f"{prefix}/bin/python{version}")
    fs.symlink(f"python{version}", f"{prefix}/bin/python3")
    fs.symlink(f"python{version}", f"{prefix}/bin/python")
    fs.symlink(f"{prefix}/bin/python{version}", PYTHON_LINK)
    fs.symlink(f"{prefix}/bin/python{version}", "/usr/local/bin/python")

    def skip_stdlib(rel: Path) -> bool:
        parts = rel.parts
        return bool(parts) and (parts[0] in STDLIB_EXCLUDE or parts[0].startswith("config-")
                                or "tests" in parts or parts[-1] in ("__phello__", "idle_test")
                                or parts[-1].startswith(DYNLOAD_EXCLUDE))

    log(f"standard library {info['stdlib']}")
    fs.copy_tree(info["stdlib"], stdlib_dest, skip_stdlib)
    if os.path.isdir(info["dynload"]) and not fs.path(f"{stdlib_dest}/lib-dynload").exists():
        fs.copy_tree(info["dynload"], f"{stdlib_dest}/lib-dynload", lambda rel: rel.name.startswith(DYNLOAD_EXCLUDE))

    # Libraries of the interpreter and of every extension module.
    private_dirs = tuple(d for d in {info["libdir"], os.path.dirname(os.path.dirname(info["executable"]))} if d)
    binaries = [info["executable"]] + [str(p) for p in Path(info["dynload"]).glob("*.so")
                                       if not p.name.startswith(DYNLOAD_EXCLUDE)]
    _add_libraries(fs, binaries, f"{prefix}/lib", private_dirs)

    site = f"{stdlib_dest}/site-packages"
    fs.mkdir(site)
    packages = {}
    extra_packages = list(extra_packages)
    if extra_packages:
        out = subprocess.run([python, "-c", _PACKAGE_PROBE, *extra_packages], capture_output=True, text=True,
                             timeout=60)
        packages = json.loads(out.stdout or "{}") if out.returncode == 0 else {}
        for name in extra_packages:
            if name not in packages:
                log(f"warning: package {name!r} is not importable by {python}; left out of the image")
                continue
            source = packages[name]
            if os.path.isdir(source):
                fs.copy_tree(source, f"{site}/{name}", lambda rel: rel.name == "__pycache__")
            else:
                fs.copy_file(source, f"{site}/{os.path.basename(source)}")
            log(f"package {name} from {source}")

    for name in HARNESS_FILES:
        fs.copy_file(HARNESS_DIR / name, f"{IMAGE_HARNESS_DIR}/{name}")

    fs.write("/etc/passwd", f"root:x:0:0:root:/root:/nonexistent\nsandbox:x:{SANDBOX_UID}:{SANDBOX_UID}:"
                            f"sandbox:/work:/nonexistent\nnobody:x:65534:65534:nobody:/nonexistent:/nonexistent\n")
    fs.write("/etc/group", f"root:x:0:\nsandbox:x:{SANDBOX_UID}:\nnogroup:x:65534:\n")
    for name in ("hosts", "hostname", "resolv.conf"):
        fs.write(f"/etc/{name}", "")

    # Compile the image's Python files with its own interpreter, so that the read-only image never
    # recompiles anything at run time (pyc files are checked against source size and mtime).
    compile_dirs = [str(fs.path(site)), str(fs.path(IMAGE_HARNESS_DIR)), str(fs.path(stdlib_dest))]
    subprocess.run([python, "-I", "-m", "compileall", "-q", "-j", "0", *compile_dirs],
                   capture_output=True, timeout=900)
    return {"python": info["full_version"], "packages": sorted(packages)}


def _tar_rootfs(root: Path, tar_path: Path) -> int:
    def normalise(member: tarfile.TarInfo) -> tarfile.TarInfo:
        member.uid = member.gid = 0
        member.uname = member.gname = "root"
        if not member.issym():
            member.mode &= ~(stat.S_ISUID | stat.S_ISGID)
        return member

    with tarfile.open(tar_path, "w") as tar:
        for entry in sorted(root.iterdir()):
            tar.add(entry, arcname=entry.name, filter=normalise)
    return tar_path.stat().st_size


def image_changes(harness: str) -> list[str]:
    return [
        f"ENV LD_LIBRARY_PATH={IMAGE_PYTHON_PREFIX}/lib",
        f"ENV AREAL_HARNESS_HASH={harness}",
        "ENV LANG=C.UTF-8",
        f"USER {SANDBOX_UID}:{SANDBOX_UID}",
        "WORKDIR /work",
        "CMD " + json.dumps(SUPERVISOR_CMD),
    ]


def build_image_offline(client, tag: str, python: str = sys.executable,
                        extra_packages: Iterable[str] = DEFAULT_EXTRA_PACKAGES,
                        log: Callable[[str], None] = lambda s: None) -> BuiltImage:
    """Assemble the root filesystem from this machine's Python and `docker import` it as `tag`."""
    import docker.errors

    repository, _, version = tag.rpartition(":") if ":" in tag.split("/")[-1] else (tag, "", "latest")
    harness = harness_hash()
    with tempfile.TemporaryDirectory(prefix="areal-sandbox-image-") as tmp:
        root = Path(tmp) / "rootfs"
        root.mkdir()
        facts = assemble_rootfs(root, python, extra_packages, log)
        tar_path = Path(tmp) / "rootfs.tar"
        size = _tar_rootfs(root, tar_path)
        log(f"root filesystem: {size / 1e6:.1f} MB; importing as {repository}:{version}")
        try:
            previous = client.api.inspect_image(f"{repository}:{version}")["Id"]
        except docker.errors.DockerException:
            previous = None
        try:
            client.api.import_image(src=str(tar_path), repository=repository, tag=version,
                                    changes=image_changes(harness))
            image = client.images.get(f"{repository}:{version}")
        except docker.errors.DockerException as exc:
            raise ImageBuildError(f"docker import of the sandbox image {tag!r} failed: {exc}") from None
    if previous and previous != image.id:
        try:  # the image this one replaces, now untagged; kept if a container still uses it
            client.api.remove_image(previous)
        except docker.errors.DockerException:
            pass
    return BuiltImage(tag=f"{repository}:{version}", image_id=image.id, harness=harness, python=facts["python"],
                      size_bytes=int(image.attrs.get("Size") or size), method="offline rootfs + docker import")


DOCKERFILE = """\
FROM {base}
RUN useradd --uid {uid} --user-group --home-dir /work --no-create-home sandbox \\
 && pip install --no-cache-dir {packages} || true
COPY harness/ {harness_dir}/
RUN python -m compileall -q {harness_dir}
ENV AREAL_HARNESS_HASH={harness} LANG=C.UTF-8
USER {uid}:{uid}
WORKDIR /work
CMD {cmd}
"""


def build_image_from_registry(client, tag: str, base: str,
                              extra_packages: Iterable[str] = DEFAULT_EXTRA_PACKAGES,
                              log: Callable[[str], None] = lambda s: None) -> BuiltImage:
    """Build from an official Python image (needs a reachable registry)."""
    import docker.errors

    harness = harness_hash()
    with tempfile.TemporaryDirectory(prefix="areal-sandbox-build-") as tmp:
        shutil.copytree(HARNESS_DIR, Path(tmp) / "harness", ignore=shutil.ignore_patterns("__pycache__"))
        (Path(tmp) / "Dockerfile").write_text(DOCKERFILE.format(
            base=base, uid=SANDBOX_UID, packages=" ".join(extra_packages) or "pip", harness_dir=IMAGE_HARNESS_DIR,
            harness=harness, cmd=json.dumps(SUPERVISOR_CMD)))
        log(f"docker build from {base}")
        try:
            image, _ = client.images.build(path=tmp, tag=tag, rm=True, pull=True)
        except docker.errors.DockerException as exc:
            raise ImageBuildError(f"building {tag!r} from {base!r} failed (is the registry reachable? "
                                  f"without one, build offline: `areal sandbox build-image`): {exc}") from None
    return BuiltImage(tag=tag, image_id=image.id, harness=harness, python=base,
                      size_bytes=int(image.attrs.get("Size") or 0), method=f"Dockerfile from {base}")


def image_harness(client, tag: str) -> str | None:
    """The harness hash recorded in an image, or None when the image does not exist."""
    import docker.errors

    try:
        attrs = client.api.inspect_image(tag)
    except docker.errors.ImageNotFound:
        return None
    for item in (attrs.get("Config") or {}).get("Env") or []:
        if item.startswith("AREAL_HARNESS_HASH="):
            return item.split("=", 1)[1]
    return ""
