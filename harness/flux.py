"""Flux's own source-controller and kustomize-controller, built from their Go modules, and a Git server.

The controllers are the released Go modules (the Go module proxy serves them), built as Flux
builds them, cached under ``$KQUOTA_CACHE/bin`` like the API server. Each module's go.mod replaces
its ``api`` module with the sibling directory ``./api``, which a module download does not have:
the build points that replace at the published api module of the same version, and changes
nothing else. Versions:

- kustomize-controller v1.9.6 (Flux 2.9; the newest v1.10 needs Go 1.27);
- source-controller v1.9.0: v1.9.6 needs ``github.com/fluxcd/pkg/artifact`` v0.18.3, which the
  proxy refuses (403), as it refuses v0.18.1 to v0.18.2; v1.9.0 needs v0.18.0, which it serves.
  kustomize-controller v1.9.6 itself builds against source-controller's api v1.9.0.

helm-controller (HelmRelease) is not on the proxy (403 for every version), so the chart is
installed through a Kustomization of ``helm template`` output (tests/gitops/).

:class:`Flux` runs both controllers as processes against a harness API server (all namespaces,
no leader election, no notification-controller), with their CRDs applied from the modules'
``config/crd/bases``. :class:`GitServer` serves bare repositories over smart HTTP with
``git http-backend`` behind a small threaded HTTP server, as a Git host would.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from harness import cache, procs
from harness.kube_apiserver import KubeAPIServer

#: name -> (Go module, version).
CONTROLLERS: dict[str, tuple[str, str]] = {
    "source-controller": ("github.com/fluxcd/source-controller", "v1.9.0"),
    "kustomize-controller": ("github.com/fluxcd/kustomize-controller", "v1.9.6"),
}
#: Changes whenever the build below changes, so that a cached binary is never one built another way.
_RECIPE = "replace ./api with the published api module; go build -mod=mod -trimpath -ldflags=-s -w; CGO_ENABLED=0"


def _go_env() -> dict[str, str]:
    return dict(os.environ, CGO_ENABLED="0", GOFLAGS="-buildvcs=false")


def module_dir(name: str) -> Path:
    """The controller's module as the proxy serves it (downloaded into Go's module cache)."""
    module, version = CONTROLLERS[name]
    out = subprocess.run(
        ["go", "mod", "download", "-json", f"{module}@{version}"],
        capture_output=True, text=True, env=_go_env(), timeout=1800, check=False,
    )  # fmt: skip
    if out.returncode != 0:
        raise procs.ComponentError(f"go mod download {module}@{version} failed:\n{out.stdout}\n{out.stderr}")
    return Path(json.loads(out.stdout)["Dir"])


def binary_path(name: str) -> Path:
    module, version = CONTROLLERS[name]
    digest = hashlib.sha256(f"{module}@{version} {_RECIPE}".encode()).hexdigest()[:12]
    return cache.root() / "bin" / f"{name}-{version}-{digest}"


def ensure_controller(name: str) -> Path:
    """Build (or reuse) one controller's binary."""
    binary = binary_path(name)
    if binary.exists():
        return binary
    module, version = CONTROLLERS[name]
    with cache.locked(f"{name}-build"):
        if binary.exists():
            return binary
        log = cache.root() / "logs" / f"{name}-build.log"
        source = module_dir(name)
        work = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=cache.root()))
        try:
            src = work / "src"
            shutil.copytree(source, src)
            for path in [src, *src.rglob("*")]:
                path.chmod(path.stat().st_mode | 0o200)
            procs.run_checked(
                ["go", "mod", "edit", "-replace", f"{module}/api={module}/api@{version}"],
                what=f"pointing {name}'s api replace at the published module",
                log=log,
                env=_go_env(),
                cwd=src,
            )
            tmp = binary.with_suffix(".tmp")
            binary.parent.mkdir(parents=True, exist_ok=True)
            procs.run_checked(
                ["go", "build", "-mod=mod", "-trimpath", "-ldflags=-s -w", "-o", str(tmp), "."],
                what=f"building {name} {version} from its Go module",
                log=log,
                env=_go_env(),
                cwd=src,
                timeout=3600,
            )
            tmp.rename(binary)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return binary


def prepare() -> dict[str, Path]:
    """Build (or reuse) both controllers; for ``python -m harness prepare``."""
    return {name: ensure_controller(name) for name in CONTROLLERS}


def crd_files() -> list[Path]:
    return sorted(p for name in CONTROLLERS for p in (module_dir(name) / "config" / "crd" / "bases").glob("*.yaml"))


def _healthy(port: int) -> bool:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as resp:
        return bool(resp.status == 200)


@dataclass
class Flux:
    """source-controller and kustomize-controller running against ``kube``. Use :meth:`start`; :meth:`stop`."""

    kube: KubeAPIServer
    workdir: Path
    processes: dict[str, procs.Process] = field(default_factory=dict)

    @classmethod
    def start(cls, kube: KubeAPIServer, workdir: Path, timeout: float = 120) -> Flux:
        binaries = prepare()
        workdir.mkdir(parents=True, exist_ok=True)
        self = cls(kube, workdir)
        kube.kubectl("create", "namespace", "flux-system", check=False)
        for crd in crd_files():
            kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crd))
        kube.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        (workdir / "storage").mkdir(exist_ok=True)
        env = dict(kube.env(), RUNTIME_NAMESPACE="flux-system")
        storage_port = procs.free_port()
        common = ["--enable-leader-election=false", "--watch-all-namespaces", "--log-level=debug"]
        source_health = procs.free_port()
        args = {
            "source-controller": [
                f"--storage-path={workdir / 'storage'}",
                f"--storage-addr=127.0.0.1:{storage_port}",
                f"--storage-adv-addr=127.0.0.1:{storage_port}",
                f"--health-addr=127.0.0.1:{source_health}",
            ],
            # Dependencies re-checked every 5 s instead of 30: the tests wait for dependsOn.
            "kustomize-controller": ["--requeue-dependency=5s", f"--health-addr=127.0.0.1:{procs.free_port()}"],
        }
        for name, extra in args.items():
            health = int(extra[-1].rsplit(":", 1)[1])
            proc = procs.Process(
                name,
                [str(binaries[name]), *common, f"--metrics-addr=127.0.0.1:{procs.free_port()}", *extra],
                workdir / f"{name}.log",
                env=env,
            )
            self.processes[name] = proc
            proc.start()
            proc.wait_until(lambda port=health: _healthy(port), timeout, "/readyz answering")
        return self

    def stop(self) -> None:
        for proc in self.processes.values():
            proc.stop()

    def logs(self) -> str:
        return "\n".join(f"== {n}\n{procs.log_tail(p.log, 40)}" for n, p in self.processes.items())


class _GitHandler(BaseHTTPRequestHandler):
    """Smart HTTP through ``git http-backend`` (CGI): what a Git host serves to Flux's source-controller."""

    root: Path

    def _cgi(self) -> None:
        path, _, query = self.path.partition("?")
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": str(self.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_ADDR": self.client_address[0],
            "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
        }
        if self.headers.get("Content-Encoding") == "gzip":
            env["HTTP_CONTENT_ENCODING"] = "gzip"
        result = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True, check=False)
        head, _, payload = result.stdout.partition(b"\r\n\r\n")
        if not _:
            head, _, payload = result.stdout.partition(b"\n\n")
        status, headers = 200, []
        for line in head.decode("latin-1").splitlines():
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.strip().split()[0])
            elif name:
                headers.append((name, value.strip()))
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = _cgi  # noqa: N815 - http.server's naming
    do_POST = _cgi  # noqa: N815

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's signature
        with (self.root / "http.log").open("a") as fh:
            fh.write(f"{time.strftime('%H:%M:%S')} {format % args}\n")


@dataclass
class GitServer:
    """Bare repositories under ``root``, served at ``http://127.0.0.1:<port>/<name>.git``."""

    root: Path
    server: ThreadingHTTPServer
    thread: threading.Thread

    @classmethod
    def start(cls, root: Path) -> GitServer:
        root.mkdir(parents=True, exist_ok=True)
        handler = type("Handler", (_GitHandler,), {"root": root})
        server = ThreadingHTTPServer(("127.0.0.1", procs.free_port()), handler)
        thread = threading.Thread(target=server.serve_forever, name="git-http", daemon=True)
        thread.start()
        return cls(root, server, thread)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def create(self, name: str) -> Repo:
        """A new bare repository and a work tree that pushes to it."""
        bare = self.root / f"{name}.git"
        _git(self.root, "init", "--bare", "--initial-branch=main", str(bare))
        work = self.root / "work" / name
        work.mkdir(parents=True)
        _git(work, "init", "--initial-branch=main")
        _git(work, "remote", "add", "origin", str(bare))
        return Repo(work, f"{self.base_url}/{name}.git")

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


def _git(cwd: Path, *args: str) -> str:
    env = dict(
        os.environ,
        GIT_AUTHOR_NAME="kquota tests",
        GIT_AUTHOR_EMAIL="tests@kquota.invalid",
        GIT_COMMITTER_NAME="kquota tests",
        GIT_COMMITTER_EMAIL="tests@kquota.invalid",
    )
    result = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise procs.ComponentError(f"git {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result.stdout


@dataclass
class Repo:
    """A work tree whose commits are pushed to the served repository at ``url``."""

    work: Path
    url: str

    def write(self, files: dict[str, str]) -> None:
        """Replace the work tree's files with ``files`` (path -> text)."""
        for path in self.work.rglob("*"):
            if path.is_file() and ".git" not in path.relative_to(self.work).parts:
                path.unlink()
        for rel, text in files.items():
            target = self.work / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)

    def commit(self, files: dict[str, str], message: str) -> str:
        """Commit ``files`` as the whole tree, push, and return the commit id."""
        self.write(files)
        _git(self.work, "add", "--all")
        _git(self.work, "commit", "--allow-empty", "-m", message)
        _git(self.work, "push", "origin", "main")
        return _git(self.work, "rev-parse", "HEAD").strip()
