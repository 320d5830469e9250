"""A real kube-apiserver with embedded etcd, built from Kubernetes' Go modules.

The Go program in ``harness/kube-apiserver/`` is compiled once per source
hash into the cache (a cold build takes about 4 minutes on 2 cores; later runs
reuse the binary). Each :class:`KubeAPIServer` runs it on a free loopback port
with its own state directory and exposes the admin kubeconfig, static team
identities and ServiceAccount tokens for RBAC tests.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from harness import cache, procs, tools

KUBERNETES_VERSION = "1.35.4"
SOURCE_DIR = Path(__file__).parent / "kube-apiserver"
REPO = Path(__file__).resolve().parents[1]

#: Static identities every test API server knows, for multi-tenancy tests:
#: name -> groups. Tokens are random per server (see identities.json).
DEFAULT_IDENTITIES: dict[str, list[str]] = {
    "team-a": ["kquota:team-a"],
    "team-b": ["kquota:team-b"],
    "nobody": [],
}


def _source_hash() -> str:
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum", "main.go"):
        digest.update((SOURCE_DIR / name).read_bytes())
    return digest.hexdigest()[:12]


def ensure_binary() -> Path:
    """Build (or reuse) the apiserver harness binary for the current source."""
    binary = cache.root() / "bin" / f"kube-apiserver-harness-{KUBERNETES_VERSION}-{_source_hash()}"
    if binary.exists():
        return binary
    with cache.locked("kube-apiserver-build"):
        if binary.exists():
            return binary
        binary.parent.mkdir(parents=True, exist_ok=True)
        tmp = binary.with_suffix(".tmp")
        env = dict(os.environ, CGO_ENABLED="0")
        procs.run_checked(
            ["go", "build", "-trimpath", "-ldflags=-s -w", "-o", str(tmp), "."],
            what=f"building kube-apiserver {KUBERNETES_VERSION} from Go modules",
            log=cache.root() / "logs" / "kube-apiserver-build.log",
            env=env,
            cwd=SOURCE_DIR,
            timeout=2400,
        )
        tmp.rename(binary)
    return binary


@dataclass
class KubeAPIServer:
    """A running API server. Use :meth:`start`; always :meth:`stop`."""

    workdir: Path
    proc: procs.Process
    server: str = ""
    kubeconfig: Path = field(default_factory=Path)
    identities: dict[str, str] = field(default_factory=dict)

    @classmethod
    def start(
        cls,
        workdir: Path,
        identities: dict[str, list[str]] | None = None,
        timeout: float = 120,
        extra_args: list[str] | None = None,
        pods: bool = False,
    ) -> KubeAPIServer:
        """Start a server; ``pods=True`` serves a cluster with controllers and a kubelet
        (harness/node.py): the ServiceAccount admission plugin gives pods their token."""
        binary = ensure_binary()
        workdir.mkdir(parents=True, exist_ok=True)
        args = [str(binary), "-dir", str(workdir)]
        # The harness picks the ports (below the ephemeral range, see procs.free_port) so that
        # restart() finds them free; the program records them in state.json for the restart.
        for flag in ("-port", "-etcd-client-port", "-etcd-peer-port"):
            args += [flag, str(procs.free_port())]
        for name, groups in (identities or DEFAULT_IDENTITIES).items():
            args += ["-user", f"{name}:{','.join(groups)}" if groups else name]
        for extra in extra_args or []:
            args += ["-apiserver-arg", extra]
        if pods:
            args.append("-pods")
        proc = procs.Process("kube-apiserver", args, workdir / "apiserver.log")
        self = cls(workdir=workdir, proc=proc)
        proc.start()
        ready = workdir / "ready.json"
        proc.wait_until(ready.exists, timeout, "/readyz answering")
        info = json.loads(ready.read_text())
        self.server = info["server"]
        self.kubeconfig = Path(info["kubeconfig"])
        self.identities = {i["name"]: i["token"] for i in json.loads((workdir / "identities.json").read_text())}
        return self

    def stop(self) -> None:
        self.proc.stop()

    def restart(self, kill: bool = False, down_seconds: float = 0.0, timeout: float = 120) -> None:
        """Stop the server (SIGTERM, or SIGKILL with ``kill``) and start it again.

        The Go program reuses what it finds in ``workdir`` (etcd data, ports,
        certificates, tokens), so the kubeconfig and every client stay valid:
        only the connections are lost. ``down_seconds`` is the outage length.
        """
        if kill:
            self.proc.kill()
        else:
            self.proc.stop()
        time.sleep(down_seconds)
        ready = self.workdir / "ready.json"
        ready.unlink(missing_ok=True)
        self.proc = procs.Process(self.proc.name, self.proc.argv, self.proc.log)
        self.proc.start()
        self.proc.wait_until(ready.exists, timeout, "/readyz answering after a restart")
        info = json.loads(ready.read_text())
        if info["server"] != self.server:
            raise procs.ComponentError(f"restarted on {info['server']}, not on {self.server}")

    # -- kubectl ---------------------------------------------------------------

    def kubectl(
        self,
        *args: str,
        input: str | None = None,  # noqa: A002 - subprocess's name for it
        check: bool = True,
        token: str | None = None,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        """Run the real kubectl against this server (as admin unless ``token``)."""
        argv = [str(tools.kubectl()), "--kubeconfig", str(self.kubeconfig)]
        if token is not None:
            argv += ["--token", token]
        argv += list(args)
        result = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout, check=False)
        if check and result.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
            )
        return result

    def env(self) -> dict[str, str]:
        """Environment for child processes (operator, helm) that should use this server."""
        return dict(os.environ, KUBECONFIG=str(self.kubeconfig))

    def token_for(self, identity: str) -> str:
        return self.identities[identity]

    def service_account_token(self, namespace: str, name: str, duration: str = "1h") -> str:
        """Mint a real ServiceAccount token through the TokenRequest API."""
        self.kubectl("create", "serviceaccount", name, "-n", namespace, check=False)
        return self.kubectl("create", "token", name, "-n", namespace, f"--duration={duration}").stdout.strip()

    def write_kubeconfig_for(self, token: str, path: Path) -> Path:
        """A kubeconfig for another identity (same server and CA)."""
        text = self.kubeconfig.read_text()
        admin = self.identities["kquota-admin"]
        path.write_text(text.replace(admin, token))
        path.chmod(0o600)
        return path

    # -- conveniences for tests --------------------------------------------------

    def create_namespace(self, prefix: str = "t") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.kubectl("create", "namespace", name)
        return name

    def apply_crds(self, directory: Path | None = None, timeout: float = 60) -> None:
        """Apply kquota's CRDs (default: the repository's crds/) and wait until Established."""
        directory = directory or REPO / "crds"
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(directory))
        deadline = time.monotonic() + timeout
        crds = sorted(p.stem for p in directory.glob("*.yaml"))
        for crd in crds:
            remaining = max(1, int(deadline - time.monotonic()))
            self.kubectl("wait", "--for=condition=Established", f"crd/{crd}", f"--timeout={remaining}s")


def start_temporary(identities: dict[str, list[str]] | None = None) -> KubeAPIServer:
    """Start a server in a fresh temporary directory (for scripts and the demo)."""
    workdir = Path(tempfile.mkdtemp(prefix="kquota-kube-"))
    return KubeAPIServer.start(workdir, identities)


def cleanup(server: KubeAPIServer) -> None:
    server.stop()
    shutil.rmtree(server.workdir, ignore_errors=True)
