"""Container images built on this machine, for harness/node.py's containerd.

No registry is reachable, so nothing is pulled: buildah builds each image and
writes a docker-archive into the cache, which the node imports
(``ctr images import``). Three images:

- the pause (sandbox) image: the static Go program ``cmd/pause`` alone in a
  scratch image;
- a Debian bookworm base with python3 and venv (debootstrap from the Debian
  mirror apt uses), the ``BASE`` the Dockerfile is built on here (see
  docs/install.md, "The image");
- the operator image: the repository's Dockerfile, on that base;
- the advisor image: Dockerfile.advisor (the operator's package with Spark and
  a Java runtime, for ``kquota advise`` as a Job), on the same base.

Each archive is keyed on what it is built from (the binary, the Dockerfile and
the sources it copies), so a warm run only imports.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness import cache, procs

REPO = Path(__file__).resolve().parents[1]
BASE_IMAGE = "localhost/kquota/debian-python:3.11-bookworm"
#: What the Dockerfile's build copies: a change to any of them is a new image.
IMAGE_SOURCES = (
    "Dockerfile",
    "requirements.lock",
    "requirements-kerberos-build.txt",
    "requirements-kerberos.txt",
    "requirements-msk.txt",
    "pyproject.toml",
    "README.md",
    "operator",
)
#: What Dockerfile.advisor's build copies.
ADVISOR_IMAGE_SOURCES = ("Dockerfile.advisor", "requirements.lock", "pyproject.toml", "README.md", "operator")
#: The host's CA bundle: where TLS to the package index is intercepted, pip in the
#: build trusts what the host trusts.
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


@dataclass(frozen=True)
class Image:
    reference: str
    archive: Path


def _digest(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        files = sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
        for file in [path] if path.is_file() else files:
            digest.update(str(file.relative_to(REPO if file.is_relative_to(REPO) else file.parent)).encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()[:12]


def _buildah(*args: str, what: str, log: Path, cwd: Path | None = None, timeout: float = 1800) -> str:
    """Run buildah, append its stderr to ``log``, return its stdout (an id, a mount point)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as fh:
        fh.write(f"$ buildah {' '.join(args)}\n")
        fh.flush()
        result = subprocess.run(
            ["buildah", *args], stdout=subprocess.PIPE, stderr=fh, text=True, cwd=cwd, timeout=timeout, check=False
        )
    if result.returncode != 0:
        raise procs.ComponentError(f"{what} failed (exit {result.returncode}); log {log}:\n{procs.log_tail(log)}")
    return result.stdout.strip()


def _archive(reference: str, archive: Path, log: Path) -> None:
    tmp = archive.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    _buildah("push", reference, f"docker-archive:{tmp}:{reference}", what=f"exporting {reference}", log=log)
    tmp.rename(archive)


def _image_exists(reference: str) -> bool:
    inspect = ["buildah", "inspect", "--type", "image", reference]
    return subprocess.run(inspect, capture_output=True, check=False).returncode == 0


#: Archives of one kind kept in the cache: each source change makes a new one (~400 MB
#: for the operator), older ones are removed (a worktree that needs one again rebuilds it
#: from buildah's layer cache in seconds).
KEEP_ARCHIVES = 4


def _cached(name: str, reference: str, archive: Path, build: Callable[[Path], None]) -> Image:
    """The image's archive in the cache, made once (across processes) by ``build(log)`` then exported."""
    if not archive.exists():
        log = cache.root() / "logs" / f"{name}-image.log"
        with cache.locked(f"{name}-image"):
            if not archive.exists():
                archive.parent.mkdir(parents=True, exist_ok=True)
                build(log)
                _archive(reference, archive, log)
                _prune(archive)
    return Image(reference, archive)


def _prune(newest: Path) -> None:
    prefix = newest.name.split("-", 1)[0]
    archives = sorted(newest.parent.glob(f"{prefix}-*.tar"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in archives[KEEP_ARCHIVES:]:
        old.unlink(missing_ok=True)


def ensure_pause_image(binary: Path) -> Image:
    """The sandbox image: ``binary`` (harness/kube-apiserver/cmd/pause) as /pause in a scratch image."""
    tag = _digest([binary])
    reference = f"localhost/kquota/pause:{tag}"

    def build(log: Path) -> None:
        container = _buildah("from", "scratch", what="a scratch container", log=log)
        try:
            _buildah("copy", "--chmod", "0755", container, str(binary), "/pause", what="copying pause", log=log)
            _buildah("config", "--entrypoint", '["/pause"]', "--user", "65535:65535", container, what="pause", log=log)
            _buildah("commit", "--quiet", container, reference, what="committing pause", log=log)
        finally:
            subprocess.run(["buildah", "rm", container], capture_output=True, check=False)

    return _cached("pause", reference, cache.root() / "images" / f"pause-{tag}.tar", build)


def ensure_base_image() -> str:
    """Debian bookworm + python3 + venv from debootstrap, in buildah's storage (no registry)."""
    if _image_exists(BASE_IMAGE):
        return BASE_IMAGE
    log = cache.root() / "logs" / "base-image.log"
    with cache.locked("base-image"):
        if _image_exists(BASE_IMAGE):
            return BASE_IMAGE
        rootfs = cache.root() / "images" / "rootfs-bookworm"
        if not (rootfs / "usr" / "bin" / "python3").exists():
            shutil.rmtree(rootfs, ignore_errors=True)
            rootfs.parent.mkdir(parents=True, exist_ok=True)
            procs.run_checked(
                ["debootstrap", "--variant=minbase", "--include=python3,python3-venv,ca-certificates",
                 "bookworm", str(rootfs), _debian_mirror()],
                what="debootstrap of Debian bookworm with python3", log=log, timeout=1800,
            )  # fmt: skip
        if HOST_CA_BUNDLE.exists():
            shutil.copyfile(HOST_CA_BUNDLE, rootfs / "etc" / "ssl" / "certs" / "ca-certificates.crt")
        container = _buildah("from", "scratch", what="a scratch container", log=log)
        try:
            mount = _buildah("mount", container, what="mounting the base", log=log)
            procs.run_checked(["cp", "-a", f"{rootfs}/.", mount], what="copying the rootfs", log=log)
            _buildah("umount", container, what="unmounting the base", log=log)
            _buildah("commit", "--quiet", container, BASE_IMAGE, what="committing the base", log=log)
        finally:
            subprocess.run(["buildah", "rm", container], capture_output=True, check=False)
    return BASE_IMAGE


def _debian_mirror() -> str:
    sources = Path("/etc/apt/sources.list.d/debian.sources")
    if sources.exists():
        for line in sources.read_text().splitlines():
            if line.startswith("URIs:"):
                return line.split()[1]
    return "http://deb.debian.org/debian"


def ensure_operator_image(tag: str | None = None) -> Image:
    """The Dockerfile's image of this tree, as ``localhost/kquota:<tag>`` (default: its source hash)."""
    digest = _digest([REPO / name for name in IMAGE_SOURCES])
    tag = tag or digest
    reference = f"localhost/kquota:{tag}"

    def build(log: Path) -> None:
        built = f"localhost/kquota:{digest}"
        if not _image_exists(built):
            _buildah(
                "build", "--isolation", "chroot", "--layers", "--force-rm",
                "--build-arg", f"BASE={ensure_base_image()}", "-t", built, ".",
                what="building the operator image (Dockerfile)", log=log, cwd=REPO,
            )  # fmt: skip
        if reference != built:
            _buildah("tag", built, reference, what=f"tagging {reference}", log=log)

    return _cached("operator", reference, cache.root() / "images" / f"kquota-{digest}-{tag}.tar", build)


def run_in(
    image: Image, argv: list[str], volumes: dict[Path, str] | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` in a container of ``image`` (buildah, runc), as the image's user, on the host's network.

    From buildah's storage where the image was built there, else from its archive.
    ``volumes`` maps host directories to read-only mount points.
    """
    if _image_exists(image.reference):
        source = ["--pull=never", image.reference]
    else:
        source = [f"docker-archive:{image.archive}"]
    created = subprocess.run(["buildah", "from", "--quiet", *source], capture_output=True, text=True, check=False)
    if created.returncode != 0:
        raise procs.ComponentError(f"buildah from {source[-1]} failed: {created.stderr.strip()}")
    container = created.stdout.strip()
    options = [f"--volume={host}:{inside}:ro" for host, inside in (volumes or {}).items()]
    options += [f"--env={name}={value}" for name, value in (env or {}).items()]
    try:
        return subprocess.run(
            ["buildah", "run", "--network=host", *options, container, "--", *argv],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
    finally:
        subprocess.run(["buildah", "rm", container], capture_output=True, check=False)


def ensure_advisor_image() -> Image:
    """Dockerfile.advisor's image of this tree, as ``localhost/kquota-advisor:<source hash>``.

    Its layers are ordered so that a change to the sources alone rebuilds only the last
    (kquota itself): the JRE and Spark layers come from buildah's layer cache.
    """
    digest = _digest([REPO / name for name in ADVISOR_IMAGE_SOURCES])
    reference = f"localhost/kquota-advisor:{digest}"

    def build(log: Path) -> None:
        if not _image_exists(reference):
            _buildah(
                "build", "--isolation", "chroot", "--layers", "--force-rm", "--jobs", "2",
                "-f", "Dockerfile.advisor", "--build-arg", f"BASE={ensure_base_image()}", "-t", reference, ".",
                what="building the advisor image (Dockerfile.advisor)", log=log, cwd=REPO,
            )  # fmt: skip

    return _cached("advisor", reference, cache.root() / "images" / f"advisor-{digest}.tar", build)
