"""The Kafka harness's two modes, as the broker configuration they write (no JVM started).

A real broker in each mode is started by tests/e2e/test_kafka_versions.py; here the
configuration itself: KRaft nodes are combined broker+controllers with a quorum, a
ZooKeeper-mode broker names ZooKeeper and has no controller listener, and each mode
gets the authorizer that exists in it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import procs
from harness.kafka_cluster import Broker, KafkaCluster, ZooKeeper


def _cluster(tmp_path: Path, zookeeper: bool, authorizer: bool = False) -> KafkaCluster:
    zk = None
    if zookeeper:
        zk = ZooKeeper(2181, tmp_path / "zoo.cfg", tmp_path / "zk.log", procs.Process("zk", ["true"], tmp_path / "l"))
    return KafkaCluster(
        version="3.9.2",
        home=tmp_path,
        workdir=tmp_path,
        cluster_id="id",
        authorizer=authorizer,
        admin_user="admin",
        admin_password="secret",
        brokers=[],
        _tool_log_flags=[],
        zookeeper=zk,
    )


def _props(cluster: KafkaCluster, tmp_path: Path) -> dict[str, str]:
    text = cluster._server_properties(1, 9092, 9093, 9094 if cluster.mode == "kraft" else 0, "1@x:9094", tmp_path, 1)
    return dict(line.split("=", 1) for line in text.splitlines())


def test_kraft_nodes_are_combined_broker_controllers(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path, zookeeper=False, authorizer=True)
    props = _props(cluster, tmp_path)
    assert cluster.mode == "kraft"
    assert props["process.roles"] == "broker,controller"
    assert props["node.id"] == "1"
    assert "CONTROLLER://127.0.0.1:9094" in props["listeners"]
    assert "zookeeper.connect" not in props
    assert props["authorizer.class.name"] == "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def test_zookeeper_mode_brokers_name_zookeeper_and_have_no_controller_listener(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path, zookeeper=True, authorizer=True)
    props = _props(cluster, tmp_path)
    assert cluster.mode == "zookeeper"
    assert props["zookeeper.connect"] == "127.0.0.1:2181"
    assert props["broker.id"] == "1"
    assert not {"process.roles", "node.id", "controller.quorum.voters", "controller.listener.names"} & props.keys()
    assert "CONTROLLER" not in props["listeners"] + props["listener.security.protocol.map"]
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://127.0.0.1:9093"
    assert props["authorizer.class.name"] == "kafka.security.authorizer.AclAuthorizer"
    assert props["super.users"] == "User:admin;User:ANONYMOUS"


def test_a_broker_without_a_controller_port_lists_no_controller(tmp_path: Path) -> None:
    proc = procs.Process("b", ["true"], tmp_path / "b.log")
    zk_broker = Broker(1, 1, 2, 0, 4, tmp_path, tmp_path, tmp_path / "b.log", proc)
    kraft_broker = Broker(1, 1, 2, 3, 4, tmp_path, tmp_path, tmp_path / "b.log", proc)
    assert "CONTROLLER" not in zk_broker.ports
    assert kraft_broker.ports["CONTROLLER"] == 3


def test_kafka_4_has_no_zookeeper_mode(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no ZooKeeper mode"):
        KafkaCluster.start(tmp_path, version="4.0.2", zookeeper=True)


def test_a_pod_host_adds_an_advertised_plaintext_pod_listener(tmp_path: Path) -> None:
    """harness/node.py's pods cannot reach 127.0.0.1: the broker also listens and advertises on the bridge."""
    cluster = _cluster(tmp_path, zookeeper=False)
    cluster.pod_host = "10.213.7.1"
    text = cluster._server_properties(1, 9092, 9093, 9094, "1@x:9094", tmp_path, 1, pod_port=9095)
    props = dict(line.split("=", 1) for line in text.splitlines())
    assert props["listeners"].endswith(",POD://10.213.7.1:9095")
    assert props["advertised.listeners"].endswith(",POD://10.213.7.1:9095")
    assert "CONTROLLER" not in props["advertised.listeners"]
    assert props["listener.security.protocol.map"].endswith(",POD:PLAINTEXT")
    assert "POD" not in _props(_cluster(tmp_path, zookeeper=False), tmp_path)["listeners"]
