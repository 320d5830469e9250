"""Pydantic models of kquota's custom resources: the public API users write.

Group ``kquota.io``, version ``v1alpha1``: KafkaCluster (cluster-scoped, admin
owned), ClientQuota, TopicQuota and ControllerMutationQuota (namespaced, team
owned). The models are the single source of the CRD schemas
(``python -m kquota.crdgen``) and validate manifests offline with the same
rules and messages as admission (:func:`parse_manifest`).
"""

from kquota.api.clientquota import ClientQuota, ClientQuotaEntity, ClientQuotaLimits, ClientQuotaSpec
from kquota.api.controllermutationquota import (
    ControllerMutationEntity,
    ControllerMutationQuota,
    ControllerMutationQuotaSpec,
)
from kquota.api.fields import EntityName, IpEntityName
from kquota.api.kafkacluster import KafkaCluster, KafkaClusterSpec
from kquota.api.manifest import KINDS, ManifestError, parse_manifest, validate_update
from kquota.api.quantity import QuantityError, byte_rate, parse_quantity
from kquota.api.resource import API_VERSION, GROUP, VERSION, Resource
from kquota.api.status import (
    ClientQuotaStatus,
    Condition,
    ControllerMutationQuotaStatus,
    KafkaClusterStatus,
    TopicQuotaStatus,
)
from kquota.api.topicquota import TopicClient, TopicQuota, TopicQuotaSpec

__all__ = [
    "API_VERSION",
    "GROUP",
    "KINDS",
    "VERSION",
    "ClientQuota",
    "ClientQuotaEntity",
    "ClientQuotaLimits",
    "ClientQuotaSpec",
    "ClientQuotaStatus",
    "Condition",
    "ControllerMutationEntity",
    "ControllerMutationQuota",
    "ControllerMutationQuotaSpec",
    "ControllerMutationQuotaStatus",
    "EntityName",
    "IpEntityName",
    "KafkaCluster",
    "KafkaClusterSpec",
    "KafkaClusterStatus",
    "ManifestError",
    "QuantityError",
    "Resource",
    "TopicClient",
    "TopicQuota",
    "TopicQuotaSpec",
    "TopicQuotaStatus",
    "byte_rate",
    "parse_manifest",
    "parse_quantity",
    "validate_update",
]
