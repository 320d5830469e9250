"""Kubernetes API access that is not Kopf's: status writes, events, Secrets, the ownership ledger.

The reconciler writes status for many resources per pass, so it talks to the
API server directly through the asyncio client (``kubernetes.aio``) rather than
through handler return values.
"""
