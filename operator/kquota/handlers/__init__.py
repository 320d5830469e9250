"""Kopf handlers: thin glue from Kubernetes events to the reconciler."""
