"""Reading Kafka's quota metrics, for the operator and the advisor alike: one parser, one decoder, one HTTP reader.

An adapter (like :mod:`kquota.kafka` and :mod:`kquota.k8s`): it does I/O and
produces the pure readings of :mod:`kquota.domain.observed`, which decide what
each status says. Only standard-library HTTP; no Kafka client is needed.

* :mod:`~kquota.metrics.exposition`: the Prometheus text format -> samples.
* :mod:`~kquota.metrics.jmx`: ``user`` and ``clientId`` label values back to Kafka's names.
* :mod:`~kquota.metrics.names`: metric and label names (a KafkaCluster's ``spec.metrics.names``).
* :mod:`~kquota.metrics.series`: raw series -> quota buckets and topic rates.
* :mod:`~kquota.metrics.http`: GET with a response size cap (:data:`~kquota.metrics.http.MAX_RESPONSE_BYTES`).
* :mod:`~kquota.metrics.scrape`: every broker's endpoint in parallel.
* :mod:`~kquota.metrics.prometheus`: the Prometheus HTTP API client.
* :mod:`~kquota.metrics.sources`: :class:`~kquota.metrics.sources.ScrapeSource` keeps the readings of
  the last window in memory (one per KafkaCluster, across passes);
  :class:`~kquota.metrics.sources.PrometheusSource` asks Prometheus for the raw samples of the window
  (``metric[2w]``), not ``max_over_time``: the broker's throttle-time is an average that stays put for
  up to a minute after throttling stops, so the decision needs the sequence of values together with the
  rate at the same scrape (:mod:`kquota.domain.observed`).

NaN: the broker's throttle-time is NaN until a client is first throttled and again once its samples
expire; it is kept as NaN ("no throttle recorded") and never averaged into a rate.

``kquota collect`` (:mod:`kquota.advisor.collect`) reads through the same parser, decoder and HTTP
reader, so a principal reads the same in a status and in the advisor's input.
"""
