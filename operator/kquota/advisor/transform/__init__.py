"""The advisor's decisions: pure DataFrame -> DataFrame functions, no I/O and no Spark actions.

Each function takes validated samples (see :mod:`kquota.advisor.schema`) or the
output of another function here and returns a new DataFrame; nothing is
collected, written or cached, so every step is testable on a few inline rows
and runs unchanged on a cluster. One module per step of the method
(``docs/advisor.md`` explains it with an example): :mod:`.entities`,
:mod:`.stats` (on the exact percentiles of :mod:`.percentiles`),
:mod:`.outliers`, :mod:`.recommend`, :mod:`.capacity`, :mod:`.topics`.
"""
