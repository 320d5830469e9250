"""kquota: Kafka quotas as Kubernetes resources.

Layers (enforced by import-linter, see pyproject.toml):
``cli | handlers`` -> ``reconcile`` -> ``kafka | k8s`` -> ``domain`` -> ``api``.
"""

__version__ = "0.1.0"
