"""Real client traffic for tests that need a broker to throttle someone: producers, consumers, request floods."""

from __future__ import annotations

import threading
import time
from typing import Any

from confluent_kafka import Consumer, Producer

# confluent-kafka's type hints do not re-export NewTopic, which is its documented import path.
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from harness.kafka_cluster import KafkaCluster

from tests.plugins.kafka import unique_name

__all__ = ["ConsumerLoad", "Load", "ProducerLoad", "RequestLoad", "create_topic"]


class Load(threading.Thread):
    """A client driving traffic on its own thread; ``throttles`` are the client's throttle callbacks (ms)."""

    def __init__(self, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.halt = threading.Event()
        self.throttles: list[float] = []
        self.error: BaseException | None = None
        self.started_at = 0.0

    def on_throttle(self, event: Any) -> None:
        self.throttles.append(float(event.throttle_time) * 1000)

    def run(self) -> None:
        self.started_at = time.monotonic()
        try:
            self.work()
        except BaseException as exc:  # noqa: BLE001 - reported by finish()
            self.error = exc

    def work(self) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        self.halt.set()
        self.join(60)
        assert not self.is_alive(), f"{self.name} did not stop"
        if self.error is not None:
            raise AssertionError(f"{self.name} failed: {self.error!r}") from self.error


class ProducerLoad(Load):
    """Produces ``rate`` bytes/s of ``size``-byte records (a bounded queue, so a throttled producer just waits)."""

    def __init__(self, config: dict[str, Any], topic: str, rate: float, size: int = 1000, **extra: Any) -> None:
        super().__init__(f"producer-{topic}")
        self.config = {"linger.ms": 5, "queue.buffering.max.kbytes": 256, **config, **extra}
        self.topic, self.rate, self.size = topic, rate, size

    def work(self) -> None:
        producer = Producer({**self.config, "throttle_cb": self.on_throttle})
        payload = b"x" * self.size
        sent = 0
        start = time.monotonic()
        while not self.halt.is_set():
            target = (time.monotonic() - start) * self.rate
            while sent < target and not self.halt.is_set():
                try:
                    producer.produce(self.topic, payload)
                except BufferError:
                    break
                sent += self.size
            producer.poll(0.02)
        # Drop what is queued: a stopped client must stop sending now, not drain for seconds.
        producer.purge()
        producer.flush(10)


class ConsumerLoad(Load):
    """Consumes a topic from the start as fast as the broker lets it."""

    def __init__(self, config: dict[str, Any], topic: str) -> None:
        super().__init__(f"consumer-{topic}")
        self.config = {**config, "group.id": unique_name("g"), "auto.offset.reset": "earliest"}
        self.topic = topic
        self.consumed = 0

    def work(self) -> None:
        consumer = Consumer({**self.config, "throttle_cb": self.on_throttle, "enable.auto.commit": False})
        try:
            consumer.subscribe([self.topic])
            while not self.halt.is_set():
                for msg in consumer.consume(num_messages=1000, timeout=0.5):
                    if msg.error() is None:
                        self.consumed += len(msg.value() or b"")
        finally:
            consumer.close()


class RequestLoad(Load):
    """Many tiny produce requests (no batching), to use broker request time rather than bytes."""

    def __init__(self, config: dict[str, Any], topic: str) -> None:
        super().__init__(f"requests-{topic}")
        self.config = {**config, "linger.ms": 0, "batch.num.messages": 1, "queue.buffering.max.messages": 1000}
        self.topic = topic

    def work(self) -> None:
        producer = Producer({**self.config, "throttle_cb": self.on_throttle})
        while not self.halt.is_set():
            try:
                producer.produce(self.topic, b"r")
            except BufferError:
                producer.poll(0.05)
            producer.poll(0.002)
        producer.purge()
        producer.flush(10)


def create_topic(kafka: KafkaCluster, name: str, partitions: int = 1) -> None:
    admin = AdminClient(kafka.client_config())
    for future in admin.create_topics([NewTopic(name, partitions, 1)], request_timeout=30).values():
        future.result()
