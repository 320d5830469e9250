"""Scraping the brokers' metrics endpoints: one GET per broker, in parallel; a broker that fails is reported."""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Final

from kquota.metrics.exposition import Sample, parse_text
from kquota.metrics.http import MetricsUnavailable, fetch_text

#: Parallel scrapes per read.
MAX_PARALLEL_SCRAPES: Final = 16


def instance_of(url: str) -> str:
    """The broker name of an endpoint: ``host:port``, as Prometheus' ``instance`` label would be."""
    parts = urllib.parse.urlsplit(url)
    if parts.port is not None or not parts.hostname:
        return parts.netloc.rsplit("@", 1)[-1]
    return f"{parts.hostname}:{443 if parts.scheme == 'https' else 80}"


@dataclass(frozen=True, slots=True)
class BrokerScrape:
    """One broker's answer (or failure) to one scrape."""

    url: str
    instance: str
    time: float
    samples: tuple[Sample, ...] = ()
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True, slots=True)
class BrokerSnapshot:
    """What every broker answered to one scrape round."""

    brokers: tuple[BrokerScrape, ...]

    @property
    def answered(self) -> list[BrokerScrape]:
        return [b for b in self.brokers if b.ok]

    @property
    def failed(self) -> list[BrokerScrape]:
        return [b for b in self.brokers if not b.ok]


def scrape_brokers(
    urls: Sequence[str],
    timeout: float = 5.0,
    prefixes: Sequence[str] | None = None,
    clock: Callable[[], float] = time.time,
) -> BrokerSnapshot:
    """Scrape every endpoint in parallel; a broker that fails is reported in the snapshot, not raised."""

    def one(url: str) -> BrokerScrape:
        instance = instance_of(url)
        try:
            text = fetch_text(url, timeout)
        except MetricsUnavailable as exc:
            return BrokerScrape(url, instance, clock(), error=str(exc))
        return BrokerScrape(url, instance, clock(), tuple(parse_text(text, prefixes)))

    if not urls:
        return BrokerSnapshot(())
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_SCRAPES, len(urls)), thread_name_prefix="kquota-scrape") as ex:
        return BrokerSnapshot(tuple(ex.map(one, urls)))
