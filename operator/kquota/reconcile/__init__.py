"""The reconciler: desired state from all resources x live broker state -> minimal change, then status.

One :class:`~kquota.reconcile.engine.ClusterReconciler` per KafkaCluster runs
level-based passes: read the broker once, plan with the pure domain functions,
apply in batches, record ownership, write status only where it changed.
"""
