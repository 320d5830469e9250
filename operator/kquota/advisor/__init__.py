"""Quota advisor: a PySpark pipeline from usage history to recommended quotas."""
