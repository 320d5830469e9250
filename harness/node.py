"""A single-node Kubernetes cluster on this machine: pods run for real.

The harness's kube-apiserver (harness/kube_apiserver.py) plus
kube-controller-manager, kube-scheduler and kubelet built from the same
Kubernetes Go module and version (``harness/kube-apiserver/cmd/``), Debian's
containerd 1.6 with runc as the CRI runtime, and Debian's CNI plugins (bridge,
host-local) for pod networking. No registry is reachable here, so images enter
containerd only by import (:meth:`Node.import_image`); the sandbox ("pause")
image is built locally too (harness/images.py).

What this machine needs and how it is wired:

- root (network namespaces, mounts, cgroups, iptables) and the Debian packages
  containerd, runc, containernetworking-plugins, iptables and buildah
  (``make system-packages``).
- cgroup v1 hierarchies (with cgroup2 at /sys/fs/cgroup/unified): the kubelet
  runs with ``failCgroupV1: false`` and the cgroupfs driver, under its own
  cgroup root ``/kquota-<id>`` so that a stopped node leaves no cgroup behind.
- Pods sit on a bridge ``kq<N>`` with the host at ``10.213.<N>.1``. There is no
  kube-proxy: one DNAT rule sends the ``kubernetes`` Service address
  (10.0.0.1:443, in the API server's certificate) to the API server on
  127.0.0.1 (``route_localnet`` on the bridge allows that), so in-cluster
  clients work unchanged. Other ClusterIP Services do not route. Kafka is
  reached on the bridge address: start the KafkaCluster with
  ``pod_host=node.host_ip`` and give pods ``cluster.pod_bootstrap``.

Everything lives in one temporary directory (containerd root and state, the
kubelet's root, pod logs, CNI leases); :meth:`Node.stop` removes every pod
sandbox through the CRI (network namespaces, veths), then the mounts, cgroups,
iptables rule and bridge, and the directory.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import cache, images, procs
from harness.kube_apiserver import KUBERNETES_VERSION, SOURCE_DIR, KubeAPIServer

#: Debian packages the node needs (``make system-packages`` installs them).
SYSTEM_PACKAGES = ("containerd", "runc", "containernetworking-plugins", "iptables", "buildah")
CNI_BIN_DIR = Path("/usr/lib/cni")
#: The ``kubernetes`` Service's address: the first of the API server's 10.0.0.0/24.
KUBERNETES_SERVICE_IP = "10.0.0.1"
CGROUP_FS = Path("/sys/fs/cgroup")
CLUSTER_DOMAIN = "cluster.local"
REPO = Path(__file__).resolve().parents[1]


def ensure_go_binary(name: str) -> Path:
    """Build (or reuse) ``harness/kube-apiserver/cmd/<name>``, keyed on its source and go.mod/go.sum."""
    digest = hashlib.sha256()
    for path in (SOURCE_DIR / "go.mod", SOURCE_DIR / "go.sum", *sorted((SOURCE_DIR / "cmd" / name).glob("*.go"))):
        digest.update(path.read_bytes())
    binary = cache.root() / "bin" / f"{name}-{KUBERNETES_VERSION}-{digest.hexdigest()[:12]}"
    if binary.exists():
        return binary
    with cache.locked(f"{name}-build"):
        if binary.exists():
            return binary
        binary.parent.mkdir(parents=True, exist_ok=True)
        tmp = binary.with_suffix(".tmp")
        procs.run_checked(
            ["go", "build", "-trimpath", "-ldflags=-s -w", "-o", str(tmp), f"./cmd/{name}"],
            what=f"building {name} {KUBERNETES_VERSION} from Go modules",
            log=cache.root() / "logs" / f"{name}-build.log",
            env=dict(os.environ, CGO_ENABLED="0"),
            cwd=SOURCE_DIR,
            timeout=2400,
        )
        tmp.rename(binary)
    return binary


def prepare() -> dict[str, Path]:
    """Build (or reuse) every binary the node runs; for ``python -m harness prepare``."""
    return {
        name: ensure_go_binary(name)
        for name in ("kubelet", "kube-controller-manager", "kube-scheduler", "cri-reset", "pause")
    }


def check_host() -> None:
    """Fail with what is missing when this machine cannot run the node."""
    problems = []
    if os.geteuid() != 0:
        problems.append("the node needs root (network namespaces, mounts, cgroups, iptables)")
    for command in ("containerd", "ctr", "runc", "iptables", "buildah", "ip"):
        if shutil.which(command) is None:
            problems.append(f"{command} is not installed")
    if not (CNI_BIN_DIR / "bridge").exists():
        problems.append(f"no CNI plugins in {CNI_BIN_DIR} (Debian containernetworking-plugins)")
    if problems:
        raise procs.ComponentError(
            "cannot run the node: " + "; ".join(problems) + " (`make system-packages` installs the packages)"
        )


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    if check and result.returncode != 0:
        raise procs.ComponentError(f"{' '.join(argv)} failed ({result.returncode}): {result.stderr.strip()}")
    return result


def _free_subnet() -> int:
    """A /24 index N for 10.213.N.0/24 no interface of this machine uses (parallel nodes)."""
    used = _run("ip", "-4", "-o", "addr", "show").stdout
    for _ in range(200):
        index = int.from_bytes(os.urandom(1), "big") % 250 + 2
        if f"10.213.{index}." not in used and not Path(f"/sys/class/net/kq{index}").exists():
            return index
    raise procs.ComponentError("no free 10.213.N.0/24 subnet for the node's bridge")


@dataclass
class Node:
    """A running single-node cluster. Use :meth:`start`; always :meth:`stop`."""

    workdir: Path
    index: int
    api: KubeAPIServer
    name: str = "kquota-node"
    processes: dict[str, procs.Process] = field(default_factory=dict)
    #: Seconds each start phase took (network, apiserver, containerd, images, control plane, kubelet).
    timings: dict[str, float] = field(default_factory=dict)
    kubelet_port: int = 0
    _nat_rule: list[str] = field(default_factory=list)

    # -- addresses -----------------------------------------------------------------

    @property
    def bridge(self) -> str:
        return f"kq{self.index}"

    @property
    def host_ip(self) -> str:
        """This machine's address on the pod bridge: pods reach host services (Kafka) here."""
        return f"10.213.{self.index}.1"

    @property
    def pod_cidr(self) -> str:
        return f"10.213.{self.index}.0/24"

    @property
    def cgroup_root(self) -> str:
        return f"/kquota-{self.index}-{self.workdir.name}"

    @property
    def containerd_socket(self) -> Path:
        return self.workdir / "containerd" / "containerd.sock"

    @property
    def kubeconfig(self) -> Path:
        return self.api.kubeconfig

    # -- lifecycle -----------------------------------------------------------------

    @classmethod
    def start(cls, workdir: Path | None = None, timeout: float = 180) -> Node:
        """Start the whole node and wait until it is Ready with a default ServiceAccount."""
        check_host()
        binaries = prepare()
        pause_image = images.ensure_pause_image(binaries["pause"])
        # A short path: containerd's and the shims' unix sockets live under it (108-byte limit).
        workdir = workdir or Path(tempfile.mkdtemp(prefix="kqn-", dir="/tmp"))
        workdir.mkdir(parents=True, exist_ok=True)
        index = _free_subnet()
        started = time.monotonic()
        api = KubeAPIServer.start(
            workdir / "apiserver",
            pods=True,
            # The node's name resolves nowhere: logs, exec and the summary API go to its address.
            extra_args=["--kubelet-preferred-address-types=InternalIP"],
        )
        node = cls(workdir=workdir, index=index, api=api, name=f"kquota-node-{index}")
        node.timings["apiserver"] = time.monotonic() - started
        try:
            node._phase("network", node._start_network)
            node._phase("containerd", lambda: node._start_containerd(pause_image.reference))
            node._phase("images", lambda: node.import_image(pause_image.archive))
            node._phase("control plane", lambda: node._start_control_plane(binaries))
            node._phase("kubelet", lambda: node._start_kubelet(binaries["kubelet"], timeout))
        except BaseException:
            node.stop()
            raise
        return node

    def _phase(self, name: str, step: Any) -> None:
        started = time.monotonic()
        step()
        self.timings[name] = time.monotonic() - started

    def _start_network(self) -> None:
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{self.host_ip}/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        # Lets the DNAT below send pod traffic to the API server's loopback address.
        Path(f"/proc/sys/net/ipv4/conf/{self.bridge}/route_localnet").write_text("1\n")
        port = self.api.server.rsplit(":", 1)[1]
        self._nat_rule = [
            "PREROUTING", "-s", self.pod_cidr, "-d", f"{KUBERNETES_SERVICE_IP}/32", "-p", "tcp", "--dport", "443",
            "-m", "comment", "--comment", f"kquota node {self.bridge}",
            "-j", "DNAT", "--to-destination", f"127.0.0.1:{port}",
        ]  # fmt: skip
        _run("iptables", "-t", "nat", "-A", *self._nat_rule)
        cni = self.workdir / "cni"
        (cni / "net.d").mkdir(parents=True, exist_ok=True)
        conflist = {
            "cniVersion": "0.4.0",
            "name": f"kquota-{self.index}",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": self.bridge,
                    "isDefaultGateway": True,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": self.pod_cidr, "gateway": self.host_ip}]],
                        "dataDir": str(cni / "ipam"),
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }
        (cni / "net.d" / "10-kquota.conflist").write_text(json.dumps(conflist, indent=2))
        service = "kubernetes.default.svc"
        dns = procs.Process(
            "cluster-dns",
            [sys.executable, "-m", "harness.cluster_dns", "--listen", self.host_ip,
             "--record", f"{service}.{CLUSTER_DOMAIN}={KUBERNETES_SERVICE_IP}",
             "--record", f"{service}={KUBERNETES_SERVICE_IP}"],
            self.workdir / "cluster-dns.log",
            cwd=REPO,
        )  # fmt: skip
        self.processes["cluster-dns"] = dns
        dns.start()
        dns.wait_until(lambda: "cluster DNS on" in dns.log.read_text(), 30, "the cluster DNS serving")
        # The kubelet's cgroup root must exist in every hierarchy before it starts.
        for hierarchy in self._cgroup_hierarchies():
            (hierarchy / self.cgroup_root.lstrip("/")).mkdir(exist_ok=True)

    def _start_containerd(self, sandbox_image: str) -> None:
        base = self.workdir / "containerd"
        base.mkdir(parents=True, exist_ok=True)
        config = base / "config.toml"
        config.write_text(
            f"""version = 2
root = "{base / "root"}"
state = "{base / "state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = "{self.containerd_socket}"
[ttrpc]
  address = "{base / "containerd.ttrpc.sock"}"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "{base / "opt"}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox_image}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  # Lowering a process's oom_score_adj is refused here (no CAP_SYS_RESOURCE in this VM's
  # sandbox): the sandbox's -998 would fail runc; clamp to containerd's own score.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{self.workdir / "cni" / "net.d"}"
"""
        )
        proc = procs.Process("containerd", ["containerd", "--config", str(config)], base / "containerd.log")
        self.processes["containerd"] = proc
        proc.start()
        proc.wait_until(lambda: self.ctr("version", check=False).returncode == 0, 60, "containerd answering")

    def _start_control_plane(self, binaries: dict[str, Path]) -> None:
        pki = self.api.workdir / "pki"
        kubeconfig = str(self.api.kubeconfig)
        common = [
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            "--leader-elect=false",
            "--v=1",
        ]
        kcm = procs.Process(
            "kube-controller-manager",
            [
                str(binaries["kube-controller-manager"]),
                *common,
                f"--secure-port={procs.free_port()}",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                "--use-service-account-credentials=false",
                "--controllers=*,-csrsigning,-csrapproving,-csrcleaner,-nodeipam,-cloud-node-lifecycle",
                "--concurrent-gc-syncs=5",
            ],
            self.workdir / "kube-controller-manager.log",
        )
        scheduler = procs.Process(
            "kube-scheduler",
            [str(binaries["kube-scheduler"]), *common, f"--secure-port={procs.free_port()}"],
            self.workdir / "kube-scheduler.log",
        )
        for proc in (kcm, scheduler):
            self.processes[proc.name] = proc
            proc.start()

    def _start_kubelet(self, binary: Path, timeout: float) -> None:
        base = self.workdir / "kubelet"
        base.mkdir(parents=True, exist_ok=True)
        self.kubelet_port = procs.free_port()
        endpoint = f"unix://{self.containerd_socket}"
        config: dict[str, Any] = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": self.host_ip,
            "port": self.kubelet_port,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": procs.free_port(),
            "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            # This machine has cgroup v1 hierarchies; Kubernetes 1.35 refuses them unless told.
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": self.cgroup_root,
            "failSwapOn": False,
            "containerRuntimeEndpoint": endpoint,
            "imageServiceEndpoint": endpoint,
            "podLogsDir": str(base / "pod-logs"),
            "resolvConf": "/etc/resolv.conf",
            "clusterDNS": [self.host_ip],
            "clusterDomain": CLUSTER_DOMAIN,
            # Images are imported, never pulled: garbage collection must not remove them,
            # and a full disk on a shared machine must not evict the test's pods.
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {"memory.available": "1Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
            "nodeStatusUpdateFrequency": "4s",
            "syncFrequency": "10s",
            "serializeImagePulls": False,
            "maxPods": 30,
        }
        # Imported here: the rest of this module is standard library only, so its builds can run
        # before the virtualenv exists (harness/gobuilds.py).
        import yaml

        config_path = base / "config.yaml"
        config_path.write_text(yaml.safe_dump(config))
        proc = procs.Process(
            "kubelet",
            [
                str(binary),
                f"--config={config_path}",
                f"--kubeconfig={self.api.kubeconfig}",
                f"--root-dir={base / 'root'}",
                f"--cert-dir={base / 'pki'}",
                f"--hostname-override={self.name}",
                f"--node-ip={self.host_ip}",
                "--v=1",
            ],
            base / "kubelet.log",
        )
        self.processes["kubelet"] = proc
        proc.start()
        proc.wait_until(self._ready, timeout, f"node {self.name} Ready and the default ServiceAccount")

    def _ready(self) -> bool:
        result = self.kubectl(
            "get", "node", self.name, "-o", "jsonpath={.status.conditions[?(@.type=='Ready')].status}", check=False
        )
        if result.stdout.strip() != "True":
            return False
        return self.kubectl("get", "serviceaccount", "default", "-n", "default", check=False).returncode == 0

    def stop(self) -> None:
        """Stop everything and leave nothing behind (see the module docstring)."""
        for name in ("kubelet", "kube-scheduler", "kube-controller-manager", "cluster-dns"):
            if name in self.processes:
                self.processes[name].stop()
        if "containerd" in self.processes and self.processes["containerd"].alive():
            binary = ensure_go_binary("cri-reset")
            reset = subprocess.run(
                [str(binary), f"unix://{self.containerd_socket}"],
                capture_output=True,
                text=True,
                timeout=180,
                check=False,
            )
            (self.workdir / "cri-reset.log").write_text(reset.stdout + reset.stderr)
            self.processes["containerd"].stop()
        self._unmount_all()
        for hierarchy in self._cgroup_hierarchies():
            _remove_cgroup_tree(hierarchy / self.cgroup_root.lstrip("/"))
        if self._nat_rule:
            _run("iptables", "-t", "nat", "-D", *self._nat_rule, check=False)
        _run("ip", "link", "del", self.bridge, check=False)
        for link in Path("/var/log/containers").glob("*.log"):
            # The kubelet links every container log there (a fixed path); drop ours.
            with contextlib.suppress(OSError):
                if str(self.workdir) in os.readlink(link):
                    link.unlink()
        self.api.stop()

    def cleanup(self) -> None:
        """:meth:`stop`, then remove the working directory."""
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def _unmount_all(self) -> None:
        prefix = str(self.workdir) + "/"
        mounts = []
        with open("/proc/self/mountinfo") as mountinfo:
            for line in mountinfo:
                point = line.split()[4].replace("\\040", " ")
                if point.startswith(prefix):
                    mounts.append(point)
        for point in sorted(mounts, key=len, reverse=True):
            _run("umount", "-l", point, check=False)

    @staticmethod
    def _cgroup_hierarchies() -> list[Path]:
        hierarchies = []
        with open("/proc/self/mountinfo") as mountinfo:
            for line in mountinfo:
                fields = line.split()
                fstype = fields[fields.index("-") + 1]
                if fstype in ("cgroup", "cgroup2") and fields[4].startswith(str(CGROUP_FS)):
                    hierarchies.append(Path(fields[4]))
        return hierarchies

    # -- using it ------------------------------------------------------------------

    def ctr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """containerd's own CLI, on the CRI's namespace (k8s.io)."""
        return _run("ctr", "--address", str(self.containerd_socket), "--namespace", "k8s.io", *args, check=check)

    def import_image(self, archive: Path) -> None:
        """Import an image archive (docker-archive or OCI, e.g. from buildah push) into containerd."""
        self.ctr("images", "import", str(archive))

    def kubectl(self, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return self.api.kubectl(*args, **kwargs)

    def get_json(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def stats_summary(self) -> dict[str, Any]:
        """The kubelet's summary API (/stats/summary), through the API server's node proxy."""
        raw = self.kubectl("get", "--raw", f"/api/v1/nodes/{self.name}/proxy/stats/summary").stdout
        result: dict[str, Any] = json.loads(raw)
        return result


def _remove_cgroup_tree(path: Path) -> None:
    if not path.is_dir():
        return
    # Children first: a cgroup directory can only be removed once it is empty of cgroups.
    for child in sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        with contextlib.suppress(OSError):
            child.rmdir()
    with contextlib.suppress(OSError):
        path.rmdir()
