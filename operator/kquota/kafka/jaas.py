"""Read a username and password out of a Kafka ``sasl.jaas.config`` value.

Strimzi's User Operator writes a KafkaUser's SCRAM credentials as a Secret with
``password`` and ``sasl.jaas.config`` and no ``username`` key, so a KafkaCluster
pointed at such a Secret reads the username from the JAAS line. The grammar is
the one Kafka's ``JaasConfig`` accepts for one login module::

    <LoginModuleClass> <required|requisite|sufficient|optional> [name=value ...];

where a value is a bare token or a double-quoted string (backslash escapes the
next character, as in Java's ``StreamTokenizer``).
"""

from __future__ import annotations

FLAGS = frozenset({"required", "requisite", "sufficient", "optional"})


class JaasError(ValueError):
    """The value is not a JAAS login module line this module can read."""


def _tokens(text: str) -> list[tuple[str, bool]]:
    """Words, ``=`` and ``;``, each with whether it was quoted."""
    out: list[tuple[str, bool]] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch in "=;":
            out.append((ch, False))
            i += 1
        elif ch == '"':
            i += 1
            buf = []
            while True:
                if i >= n:
                    raise JaasError("unterminated quoted value")
                ch = text[i]
                if ch == "\\" and i + 1 < n:
                    buf.append(text[i + 1])
                    i += 2
                elif ch == '"':
                    i += 1
                    break
                else:
                    buf.append(ch)
                    i += 1
            out.append(("".join(buf), True))
        else:
            start = i
            while i < n and not text[i].isspace() and text[i] not in '=;"':
                i += 1
            out.append((text[start:i], False))
    return out


def jaas_options(text: str) -> dict[str, str]:
    """The options of the single login module in ``text`` (raises JaasError on anything else)."""
    toks = _tokens(text)
    if len(toks) < 3 or toks[-1] != (";", False):
        raise JaasError("expected '<LoginModule> <flag> name=value ... ;'")
    (module, _), (flag, _) = toks[0], toks[1]
    if flag not in FLAGS or module in ("=", ";"):
        raise JaasError(f"expected a login module and a flag ({', '.join(sorted(FLAGS))})")
    body = toks[2:-1]
    if len(body) % 3:
        raise JaasError("options must be name=value pairs (one login module only)")
    options: dict[str, str] = {}
    for k in range(0, len(body), 3):
        (name, name_quoted), eq, (value, value_quoted) = body[k], body[k + 1], body[k + 2]
        bad_value = not value_quoted and value in ("=", ";")
        if name_quoted or name in ("=", ";") or eq != ("=", False) or bad_value:
            raise JaasError("options must be name=value pairs (one login module only)")
        options[name] = value
    return options
