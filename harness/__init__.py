"""Starts the real components kquota is tested against: a KRaft Kafka cluster
built from Maven Central jars and a kube-apiserver with embedded etcd built from
Kubernetes' Go modules, plus the kubectl and helm binaries.

Used by the pytest fixtures (tests/conftest.py) and by ``make demo``
(``python -m harness demo``).
"""
