"""spec.metrics.prometheusSelector cases shared by the unit, admission (CEL) and Prometheus tests."""

from __future__ import annotations

from typing import NamedTuple

import pytest

VALID_SELECTORS = [
    pytest.param('job="kafka-prod"', id="one matcher"),
    pytest.param('job="kafka-prod", namespace="kafka"', id="two matchers"),
    pytest.param('job =~ "kafka-(prod|dr)"', id="a regular expression with blanks around the operator"),
    pytest.param('env!="test",\tteam!~"ops.*"', id="negative matchers after a tab"),
    pytest.param('job="kafka",', id="a trailing comma, as PromQL allows"),
    pytest.param('job="a\\"b"', id="an escaped double quote"),
    pytest.param('path=~"a\\\\.b"', id="an escaped backslash (a regex's literal dot)"),
    pytest.param('team="Zoë 用户"', id="non-ASCII letters in a value"),
    pytest.param('x="\\101\\x41\\u0041\\U00000041\\n\\t\\a\\b\\f\\r\\v\\\\"', id="every escape PromQL knows"),
    pytest.param('_private="x"', id="a label name starting with an underscore"),
    pytest.param('a=""', id="an empty value"),
]


class Refused(NamedTuple):
    selector: str
    #: Whether Prometheus itself parses ``up{<selector>}``: the refusals that are not PromQL errors are
    #: choices (one way to quote; nothing but matchers), checked against the real parser too.
    promql_valid: bool


INVALID_SELECTORS = [
    pytest.param(Refused("job=kafka", False), id="an unquoted value"),
    pytest.param(Refused('{job="kafka"}', False), id="braces"),
    pytest.param(Refused('up{job="kafka"}', False), id="a metric name"),
    pytest.param(Refused(",", False), id="a comma alone"),
    pytest.param(Refused('job "kafka"', False), id="no operator"),
    pytest.param(Refused('job=="kafka"', False), id="a doubled equals sign"),
    pytest.param(Refused('1job="x"', False), id="a label name starting with a digit"),
    pytest.param(Refused('job.name="x"', False), id="a dot in a label name"),
    pytest.param(Refused('job="a\\.b"', False), id="an escape PromQL does not know"),
    pytest.param(Refused('job="\\400"', False), id="an octal escape above 255"),
    pytest.param(Refused('job="kafka', False), id="an unterminated value"),
    pytest.param(Refused('job="a\nb"', False), id="a newline in a value"),
    pytest.param(Refused('job="a" env="b"', False), id="a missing comma"),
    pytest.param(Refused('job="a",,env="b"', False), id="two commas"),
    pytest.param(Refused('job="a"} or up{a="b"', True), id="a second PromQL expression"),
    pytest.param(Refused("job='kafka'", True), id="single quotes"),
    pytest.param(Refused("job=`kafka`", True), id="backquotes"),
]
