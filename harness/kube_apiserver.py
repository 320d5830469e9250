"""A real kube-apiserver with embedded etcd, built from Kubernetes' Go modules.

The Go program in ``harness/kube-apiserver/`` is compiled once per source
hash into the cache (a cold build takes about 4 minutes on 2 cores; later runs
reuse the binary). Each :class:`KubeAPIServer` runs it on a free loopback port
with its own state directory and exposes the admin kubeconfig, static team
identities and ServiceAccount tokens for RBAC tests.

Two Kubernetes versions can be built: the current one (1.35, the default) and
the supported floor (1.31, ``harness/kube-apiserver-1.31/``: the same main.go
against k8s.io/kubernetes 1.31 and its etcd 3.5). The tests' fixtures start the
one ``KQUOTA_KUBE_VERSION`` names (:func:`selected_version`), so the same tests
run on either; ``make test-k8s-floor`` runs the floor's selection (its first
build took 15 minutes on 2 cores busy with other tests).
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

#: The API servers the harness builds: minor -> (k8s.io/kubernetes version, Go module).
#: 1.31 is the supported floor (README, "Supported versions"): the first with CEL's isIP()/isCIDR().
VERSIONS: dict[str, tuple[str, Path]] = {
    "1.35": (KUBERNETES_VERSION, SOURCE_DIR),
    "1.31": ("1.31.14", Path(__file__).parent / "kube-apiserver-1.31"),
}
DEFAULT_MINOR = "1.35"
#: Names the minor the tests' API servers run (tests/plugins/kube.py); unset: DEFAULT_MINOR.
VERSION_ENV = "KQUOTA_KUBE_VERSION"

#: Static identities every test API server knows, for multi-tenancy tests:
#: name -> groups. Tokens are random per server (see identities.json).
DEFAULT_IDENTITIES: dict[str, list[str]] = {
    "team-a": ["kquota:team-a"],
    "team-b": ["kquota:team-b"],
    "nobody": [],
}


def selected_version() -> str:
    """The minor ``KQUOTA_KUBE_VERSION`` selects for the tests (default: the current one)."""
    minor = os.environ.get(VERSION_ENV, "") or DEFAULT_MINOR
    if minor not in VERSIONS:
        raise ValueError(f"{VERSION_ENV}={minor!r}: expected one of {', '.join(sorted(VERSIONS))}")
    return minor


def _ldflags(version: str) -> str:
    """Link flags: stripped, and the version stamped as Kubernetes' own release builds do
    (a module build otherwise says v0.0.0-master), so ``/version`` and ``kubectl version``
    name the server's real version and a test can check which one a run got."""
    major, minor = version.split(".")[:2]
    stamp = "k8s.io/component-base/version"
    return f"-s -w -X {stamp}.gitVersion=v{version} -X {stamp}.gitMajor={major} -X {stamp}.gitMinor={minor}"


def _source_hash(source_dir: Path, version: str) -> str:
    digest = hashlib.sha256(_ldflags(version).encode())
    for name in ("go.mod", "go.sum", "main.go"):
        # The floor's main.go is a symlink to the current one's: read_bytes follows it.
        digest.update((source_dir / name).read_bytes())
    return digest.hexdigest()[:12]


def ensure_binary(minor: str = DEFAULT_MINOR) -> Path:
    """Build (or reuse) the apiserver harness binary of ``minor`` for the current source."""
    version, source_dir = VERSIONS[minor]
    binary = cache.root() / "bin" / f"kube-apiserver-harness-{version}-{_source_hash(source_dir, version)}"
    if binary.exists():
        return binary
    with cache.locked("kube-apiserver-build"):
        if binary.exists():
            return binary
        binary.parent.mkdir(parents=True, exist_ok=True)
        tmp = binary.with_suffix(".tmp")
        env = dict(os.environ, CGO_ENABLED="0")
        log_name = "kube-apiserver-build.log" if minor == DEFAULT_MINOR else f"kube-apiserver-{version}-build.log"
        procs.run_checked(
            ["go", "build", "-trimpath", f"-ldflags={_ldflags(version)}", "-o", str(tmp), "."],
            what=f"building kube-apiserver {version} from Go modules",
            log=cache.root() / "logs" / log_name,
            env=env,
            cwd=source_dir,
            timeout=2400,
        )
        tmp.rename(binary)
    return binary


@dataclass
class KubeAPIServer:
    """A running API server. Use :meth:`start`; always :meth:`stop`."""

    workdir: Path
    proc: procs.Process
    #: The Kubernetes version it runs (``/version`` says the same).
    version: str = KUBERNETES_VERSION
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
        version: str = DEFAULT_MINOR,
    ) -> KubeAPIServer:
        """Start a server; ``pods=True`` serves a cluster with controllers and a kubelet
        (harness/node.py): the ServiceAccount admission plugin gives pods their token.
        ``version`` is a minor of :data:`VERSIONS` (the tests pass :func:`selected_version`)."""
        binary = ensure_binary(version)
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
        self = cls(workdir=workdir, proc=proc, version=VERSIONS[version][0])
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


def start_temporary(identities: dict[str, list[str]] | None = None, version: str = DEFAULT_MINOR) -> KubeAPIServer:
    """Start a server in a fresh temporary directory (for scripts and the demo)."""
    workdir = Path(tempfile.mkdtemp(prefix="kquota-kube-"))
    return KubeAPIServer.start(workdir, identities, version=version)


def cleanup(server: KubeAPIServer) -> None:
    server.stop()
    shutil.rmtree(server.workdir, ignore_errors=True)
