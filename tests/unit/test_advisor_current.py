"""`kquota advise --current`: the applied ClientQuotas read from manifests and compared with the advice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kquota.advisor.current import changes, read_current, summary_line


def cq(name: str, entity: dict[str, Any], quota: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "kquota.io/v1alpha1",
        "kind": "ClientQuota",
        "metadata": {"name": name},
        "spec": {"entity": entity, "quota": quota},
    }


def rec(kind: str, user: str | None, client: str | None, resource: str, quota: float) -> dict[str, Any]:
    return {
        "kind": kind,
        "user": user,
        "client_id": client,
        "is_default": user is None and client is None,
        "resource": resource,
        "quota": quota,
    }


def write(path: Path, *docs: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump_all(docs))
    return path


def test_every_entity_form_and_quantity_is_read_as_the_recommendations_name_it(tmp_path: Path) -> None:
    path = write(
        tmp_path / "q.yaml",
        cq("a", {"user": {"default": True}}, {"producerByteRate": "1Mi", "consumerByteRate": 2048}),
        cq("b", {"user": {"name": "alice"}}, {"producerByteRate": "1.5Mi"}),
        cq("c", {"clientId": {"name": "app"}}, {"requestPercentage": 50}),
        cq("d", {"user": {"name": "bob"}, "clientId": {"name": "etl"}}, {"consumerByteRate": "1M"}),
        cq("e", {"user": {"default": True}, "clientId": {"default": True}}, {"producerByteRate": 10}),
        cq("f", {"clientId": {"default": True}}, {"producerByteRate": 20}),
    )
    current = read_current(str(path))
    assert current.manifests == 6 and current.skipped == []
    assert current.quotas == {
        ("user", None, None, True): {"produce": 1048576.0, "fetch": 2048.0},
        ("user", "alice", None, False): {"produce": 1572864.0},
        ("client-id", None, "app", False): {"request": 50.0},
        ("user+client-id", "bob", "etl", False): {"fetch": 1e6},
        ("user+client-id", None, None, True): {"produce": 10.0},
        ("client-id", None, None, True): {"produce": 20.0},
    }


def test_other_kinds_ip_entities_and_half_default_pairs_are_named_as_not_compared(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    write(tmp_path / "dir" / "cluster.yaml", {"apiVersion": "kquota.io/v1alpha1", "kind": "KafkaCluster"})
    write(
        tmp_path / "dir" / "quotas.yml",
        cq("ip", {"ip": {"name": "192.0.2.10"}}, {"connectionCreationRate": 5}),
        cq("half", {"user": {"name": "alice"}, "clientId": {"default": True}}, {"producerByteRate": 5}),
        cq("ok", {"user": {"name": "alice"}}, {"producerByteRate": 5}),
    )
    current = read_current(str(tmp_path / "dir"))
    assert current.manifests == 1
    assert current.quotas == {("user", "alice", None, False): {"produce": 5.0}}
    assert len(current.skipped) == 3
    assert "cluster.yaml: a KafkaCluster, not a ClientQuota" in current.skipped[0]
    assert "(document 1): an ip entity" in current.skipped[1]
    assert "(document 2): a (user, client-id) entity with one default part" in current.skipped[2]


def test_a_kubectl_list_is_read_item_by_item(tmp_path: Path) -> None:
    items = [cq("a", {"user": {"name": "alice"}}, {"producerByteRate": 5})]
    path = write(tmp_path / "list.yaml", {"apiVersion": "v1", "kind": "List", "items": items})
    assert read_current(str(path)).quotas == {("user", "alice", None, False): {"produce": 5.0}}


def test_an_invalid_clientquota_is_an_error_naming_the_file_and_the_problem(tmp_path: Path) -> None:
    path = write(tmp_path / "bad.yaml", cq("a", {"user": {"name": "alice"}}, {"producerByteRate": "lots"}))
    with pytest.raises(ValueError, match=r"bad\.yaml: not a valid ClientQuota: .*producerByteRate"):
        read_current(str(path))


def test_two_manifests_setting_one_key_differently_is_an_error_naming_both(tmp_path: Path) -> None:
    path = write(
        tmp_path / "dup.yaml",
        cq("a", {"user": {"name": "alice"}}, {"producerByteRate": 5}),
        cq("b", {"user": {"name": "alice"}}, {"producerByteRate": 6}),
    )
    with pytest.raises(ValueError, match=r"\(document 2\): sets produce of users/alice to 6, but .*\(document 1\)"):
        read_current(str(path))


def test_a_missing_path_is_an_error() -> None:
    with pytest.raises(FileNotFoundError, match="no such file"):
        read_current("/nonexistent/quotas")


def test_each_key_gets_one_action_and_the_counts_add_up(tmp_path: Path) -> None:
    current = read_current(
        str(
            write(
                tmp_path / "q.yaml",
                cq("d", {"user": {"default": True}}, {"producerByteRate": "400Ki", "consumerByteRate": "1Mi"}),
                cq("h", {"user": {"name": "etl"}}, {"producerByteRate": "10Mi"}),
                cq("a", {"user": {"name": "alice"}}, {"producerByteRate": "1Mi"}),
            )
        )
    )
    recs = [
        rec("user", None, None, "produce", 400 * 1024),
        rec("user", None, None, "fetch", 500 * 1024),
        rec("user", "etl", None, "produce", 15 * 2**20),
        rec("user", "etl", None, "fetch", 20 * 2**20),
    ]
    out = changes(recs, current)
    got = {(r["entity"], r["resource"]): (r["action"], r["change_percent"]) for r in out["rows"]}
    assert got == {
        ("users/<default>", "produce"): ("keep", 0.0),
        ("users/<default>", "fetch"): ("lower", -51.2),
        ("users/etl", "produce"): ("raise", 50.0),
        ("users/etl", "fetch"): ("add", None),
        ("users/alice", "produce"): ("drop", None),
    }
    # Defaults first, then by resource and entity.
    assert [r["entity"] for r in out["rows"]][:2] == ["users/<default>", "users/<default>"]
    assert out["counts"] == {"add": 1, "raise": 1, "lower": 1, "drop": 1, "keep": 1}
    line = summary_line(out)
    assert line.endswith(", 3 ClientQuotas): 1 added, 1 raised, 1 lowered, 1 dropped, 1 unchanged.")
