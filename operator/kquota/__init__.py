"""kquota: Kafka quotas as Kubernetes resources.

Layers (enforced by import-linter, see pyproject.toml):
``cli`` -> ``handlers`` -> ``reconcile`` -> ``kafka | k8s | metrics`` -> ``domain`` -> ``api``;
``advisor`` stands on ``metrics`` and ``api``. See ARCHITECTURE.md.
"""

__version__ = "0.1.0"
