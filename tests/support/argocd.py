"""Argo CD's health assessment of a resource with a Lua health check, as Argo CD runs it.

Read from Argo CD's source (argo-cd util/lua/lua.go, ``runLua`` and ``ExecuteHealthLua``; gitops-engine
pkg/health/health.go, ``GetResourceHealth``), the same in Argo CD 2.x and 3.x:

- a resource with ``metadata.deletionTimestamp`` is ``Progressing``, "Pending deletion", and the script
  does not run (unless the resource carries Argo CD's own hook finalizer);
- the script runs in a fresh Lua 5.1 state (gopher-lua) with only the base, table and package
  libraries and a safe ``os`` (``time`` and ``date``): no ``string``, ``math``, ``io`` or ``debug``,
  and strings have no methods; the resource is the global ``obj`` (JSON numbers as Lua numbers);
- the script's return value must be a table; its ``status`` must be one of Argo CD's health codes,
  otherwise the health is ``Unknown``, "Lua returned an invalid health status".

The interpreter is lupa's bundled Lua 5.1 (PyPI), with the libraries Argo CD does not open removed.
"""

from __future__ import annotations

from typing import Any

from lupa import lua51

HOOK_FINALIZER = "argocd.argoproj.io/hook-finalizer"
HEALTH_CODES = frozenset({"Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown"})

#: Run before the script: what gopher-lua's state has when Argo CD skips the open libraries.
_RESTRICT = """
getmetatable("").__index = nil
string, math, io, debug, coroutine = nil, nil, nil, nil, nil
local time, date = os.time, os.date
os = {time = time, date = date}
"""


class LuaHealthError(RuntimeError):
    """The script failed or returned something other than a table: Argo CD shows the error as Unknown."""


def health(obj: dict[str, Any], script: str) -> tuple[str, str]:
    """(health status, message) Argo CD shows for ``obj`` with the health check ``script``."""
    metadata = obj.get("metadata", {})
    if metadata.get("deletionTimestamp") and HOOK_FINALIZER not in metadata.get("finalizers", []):
        return "Progressing", "Pending deletion"
    lua = lua51.LuaRuntime(unpack_returned_tuples=True, register_eval=False)
    lua.execute(_RESTRICT)
    lua.globals().obj = lua.table_from(obj, recursive=True)
    try:
        result = lua.execute(script)
    except lua51.LuaError as exc:
        raise LuaHealthError(str(exc)) from exc
    if lua.globals().type(result) != "table":
        raise LuaHealthError(f"expect table output from Lua script, not {lua.globals().type(result)}")
    status, message = result["status"], result["message"]
    if status not in HEALTH_CODES:
        return "Unknown", "Lua returned an invalid health status"
    return str(status), "" if message is None else str(message)
