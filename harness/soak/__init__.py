"""The seeded chaos soak (issue 23): random GitOps histories interleaved with faults.

``history`` generates a history from a seed (pure, no I/O); ``engine`` plays
it against a real API server, Kafka broker(s) and operator processes, checks the
invariants after every fault and writes the report; ``tenancy`` holds the
grants the ``tenancy-revoked`` fault sets and the oracle of what they permit. ``python -m harness soak``
(``make soak SEED=… FAULTS=…``) runs it; tests/soak/ runs a short seed of it.
"""
