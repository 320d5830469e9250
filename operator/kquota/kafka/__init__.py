"""The only code that talks to Kafka: quota admin adapter, cluster metadata, metrics readers."""
