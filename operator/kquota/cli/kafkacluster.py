"""A KafkaCluster read through the kubeconfig, as the operator reads it: the connection with its Secrets, and what
only the cluster knows (the ownership ledger, the quota resources, the operator's published settings)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, Final

from kquota.api.manifest import QUOTA_KINDS
from kquota.cli import common
from kquota.cli.target import Quotas, Target, TargetError
from kquota.domain.claims import ResourceClaim, claim_from_body
from kquota.domain.guard import APPROVAL_ANNOTATION, GuardLimits

if TYPE_CHECKING:
    from kquota.k8s.api import Kube
    from kquota.k8s.published import PublishedSettings

#: The ConfigMap where the operator publishes its default cluster (kquota.k8s.published.NAME, which
#: imports the Kubernetes client: offline commands do not pay for it).
PUBLISHED_NAME: Final = "kquota-operator"


async def _open_kube(kubeconfig: str | None, context: str | None) -> Kube:
    from kquota.k8s.api import Kube, connect

    if context is None:
        return Kube(await connect(kubeconfig))
    # kquota.k8s.api.connect has no context parameter yet; until it does, the
    # context is chosen here with the same client library it uses.
    from kubernetes.aio import client, config

    cfg = client.Configuration()
    await config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)  # type: ignore[no-untyped-call]
    return Kube(client.ApiClient(configuration=cfg))


def _api_error(exc: Exception, what: str) -> TargetError:
    status = getattr(exc, "status", None)
    if status == 404:
        return TargetError(f"{what}: not found")
    if status in (401, 403):
        return TargetError(f"{what}: not allowed (HTTP {status}); check your kubeconfig and RBAC")
    if status is not None:
        return TargetError(f"{what}: HTTP {status} {getattr(exc, 'reason', '')}".rstrip())
    return TargetError(f"{what}: cannot reach the Kubernetes API: {type(exc).__name__}: {exc}")


def choose_default_cluster(
    flag: str | None, published: PublishedSettings | None, problem: str | None, namespace: str
) -> tuple[str, str, str | None]:
    """The default cluster, where it comes from, and a warning when the flag and the operator disagree.

    ``flag`` is --default-cluster (or $KQUOTA_DEFAULT_CLUSTER); ``published``
    what the operator wrote in ConfigMap kquota-operator, None when absent or
    unreadable (``problem`` says why). Without either there is no guessing:
    a wrong default cluster puts every resource without clusterRef on the
    wrong cluster, and the plan shows removals that will not happen.
    """
    where = f"ConfigMap {namespace}/{PUBLISHED_NAME}"
    if flag:
        warning = None
        if published is not None and published.default_cluster != flag:
            warning = (
                f"--default-cluster {flag} is not the operator's: it runs with {published.default_cluster} "
                f"({where}); using {flag} as asked"
            )
        return flag, "--default-cluster", warning
    if published is not None:
        return published.default_cluster, f"the operator's, from {where}", None
    why = problem or f"no {where}: no kquota operator that publishes it has started with this ledger namespace"
    raise TargetError(
        f"the operator's default cluster is unknown ({why}); pass --default-cluster NAME, the operator's "
        "KQUOTA_DEFAULT_CLUSTER (Helm: operator.defaultCluster, else the first of kafka.clusters), or "
        "--ledger-namespace if the operator runs in another namespace"
    )


async def _published(kube: Kube, args: argparse.Namespace) -> tuple[PublishedSettings | None, str | None]:
    """The operator's published settings, or why they cannot be read."""
    from kquota.k8s.published import read

    try:
        return await read(kube, args.ledger_namespace), None
    except ValueError as exc:
        return None, f"ConfigMap {args.ledger_namespace}/{PUBLISHED_NAME} cannot be read: {exc}"
    except Exception as exc:  # noqa: BLE001 - translated into a message for the user
        return None, str(_api_error(exc, f"ConfigMap {args.ledger_namespace}/{PUBLISHED_NAME}"))


def _default_cluster(args: argparse.Namespace, found: PublishedSettings | None, problem: str | None) -> tuple[str, str]:
    """:func:`choose_default_cluster` with the ConfigMap read from the cluster (a mismatch is warned about)."""
    name, source, warning = choose_default_cluster(args.default_cluster, found, problem, args.ledger_namespace)
    if warning:
        common.warn(warning)
    return name, source


async def from_kubernetes(args: argparse.Namespace, with_claimants: bool, need_ledger: bool) -> Target:
    from kquota.k8s.api import SecretNotFound
    from kquota.k8s.ledger import LedgerStore
    from kquota.reconcile.build import cluster_config
    from kquota.reconcile.settings import OperatorSettings

    name: str = args.cluster
    try:
        kube = await _open_kube(args.kubeconfig, args.context)
    except Exception as exc:  # noqa: BLE001 - any kubeconfig problem ends here, with its message
        raise TargetError(f"cannot load the kubeconfig: {type(exc).__name__}: {exc}") from None
    try:
        try:
            body = await kube.get_cluster_object("kafkaclusters", name)
        except Exception as exc:  # noqa: BLE001 - translated into a message for the user
            raise _api_error(exc, f"KafkaCluster {name}") from None
        published, published_problem = await _published(kube, args)
        # The operator's own protected principals and guard settings, as it publishes them.
        # model_construct: the defaults, not this shell's KQUOTA_* variables (the operator's environment
        # is not the user's).
        overrides: dict[str, Any] = {"namespace": args.ledger_namespace}
        if published is not None:
            overrides["protected_users"] = list(published.protected_users)
            overrides["protected_client_ids"] = list(published.protected_client_ids)
        settings = OperatorSettings.model_construct(**overrides)
        limits = GuardLimits()
        if published is not None and published.deletion_guard is not None:
            limits = GuardLimits(*published.deletion_guard)
        try:
            cfg = await cluster_config(body, kube, settings)
        except SecretNotFound as exc:
            raise TargetError(f"KafkaCluster {name}: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - one line for the user, never a traceback (as the operator's status)
            raise TargetError(f"KafkaCluster {name}: cannot be resolved: {type(exc).__name__}: {exc}") from None
        if cfg is None:
            raise TargetError(f"KafkaCluster {name} has an invalid spec")
        ledger: Quotas | None = None
        ledger_problem: str | None = None
        try:
            ledger = await LedgerStore(kube, args.ledger_namespace, name).load()
        except ValueError as exc:
            ledger_problem = f"the ownership ledger of {name} cannot be read: {exc}"
        except Exception as exc:  # noqa: BLE001 - translated into a message for the user
            ledger_problem = str(_api_error(exc, f"ownership ledger in namespace {args.ledger_namespace}"))
        if ledger_problem is not None and need_ledger:
            raise TargetError(ledger_problem)
        claimants: list[ResourceClaim] | None = None
        default_cluster: str | None = None
        default_source: str | None = None
        if with_claimants:
            default_cluster, default_source = _default_cluster(args, published, published_problem)
            claimants = []
            for kind, plural in QUOTA_KINDS.items():
                try:
                    listing = await kube.list_cluster_objects(plural)
                except Exception as exc:  # noqa: BLE001 - translated into a message for the user
                    raise _api_error(exc, f"listing {plural}") from None
                for item in listing.get("items") or []:
                    found = claim_from_body(kind, item, default_cluster)
                    if found.cluster == name:
                        claimants.append(found)
    finally:
        await kube.close()
    return Target(
        connection=cfg.connection,
        cluster=name,
        policy=cfg.policy,
        protection=cfg.protection,
        grants=cfg.grants,
        ledger=ledger,
        claimants=claimants,
        ledger_namespace=args.ledger_namespace,
        ledger_problem=ledger_problem,
        default_cluster=default_cluster,
        default_cluster_source=default_source,
        settings=settings,
        principals=cfg.principals,
        guard=limits,
        approval=((body.get("metadata") or {}).get("annotations") or {}).get(APPROVAL_ANNOTATION),
        callback_honoured=cfg.callback_honoured,
    )
