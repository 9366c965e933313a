"""Tools on the Ollama wire: definitions, the calls an assistant made, and the ids that pair them.

Ollama's calls and results usually carry no id: a result names only the tool (`tool_name`),
and newer clients add `tool_call_id`. The canonical form pairs results with calls by id, so the
missing ids are minted here (`call_0`, `call_1`, ... in order of appearance, skipping any id the
client used itself) and each result without an id is given the id of the earliest earlier call
to the same tool that has not been answered yet. Minting by position keeps decoding
deterministic: the same body always yields the same canonical request.
"""

from __future__ import annotations

from typing import Any

import orjson

from mindrouter.canonical import Tool, ToolCall
from mindrouter.dialects.ollama.fields import (
    JSONObject,
    as_object,
    field,
    invalid,
    opt_int,
    opt_list,
    opt_object,
    opt_str,
    req_str,
)


def decode_tools(body: JSONObject) -> list[Tool]:
    """`tools`: OpenAI-like function definitions; an empty list (the SDK's default) is fine."""
    items = opt_list(body, "tools", "") or []
    tools: list[Tool] = []
    for i, item in enumerate(items):
        where = field("tools", i)
        obj = as_object(item, where)
        kind = opt_str(obj, "type", where)
        if kind not in (None, "", "function"):
            raise invalid(field(where, "type"), f'must be "function", got {kind!r}')
        fn_where = field(where, "function")
        fn = opt_object(obj, "function", where)
        if fn is None:
            raise invalid(fn_where, "is required")
        tool = Tool(
            name=req_str(fn, "name", fn_where), description=opt_str(fn, "description", fn_where)
        )
        parameters = opt_object(fn, "parameters", fn_where)
        if parameters is not None:
            tool.parameters = parameters
        tools.append(tool)
    return tools


class CallLedger:
    """Mints ids for calls that came without one and pairs tool results with their calls."""

    def __init__(self, taken: set[str]) -> None:
        self._taken = taken
        self._next = 0
        self._names: dict[str, str] = {}
        # Calls not answered yet, oldest first.
        self._pending: list[ToolCall] = []

    def mint(self) -> str:
        while f"call_{self._next}" in self._taken:
            self._next += 1
        minted = f"call_{self._next}"
        self._taken.add(minted)
        return minted

    def called(self, call: ToolCall) -> None:
        self._names.setdefault(call.id, call.name)
        self._pending.append(call)

    def answer(self, call_id: str | None, tool_name: str | None) -> tuple[str | None, str | None]:
        """The id and tool name a result answers, filling in whichever the client left out."""
        if call_id is not None:
            self._pending = [c for c in self._pending if c.id != call_id]
            return call_id, tool_name or self._names.get(call_id)
        for i, call in enumerate(self._pending):
            if tool_name is None or call.name == tool_name:
                del self._pending[i]
                return call.id, call.name
        return None, tool_name


def client_ids(items: list[Any]) -> set[str]:
    """Every call id the client chose itself, so minted ids never collide with one."""
    ids: set[str] = set()
    for item in items:
        if not isinstance(item, dict):
            continue
        if isinstance(item.get("tool_call_id"), str):
            ids.add(item["tool_call_id"])
        calls = item.get("tool_calls")
        for call in calls if isinstance(calls, list) else []:
            if isinstance(call, dict) and isinstance(call.get("id"), str):
                ids.add(call["id"])
    return ids


def decode_tool_calls(obj: JSONObject, where: str, ledger: CallLedger) -> list[ToolCall]:
    """An assistant message's `tool_calls`, arguments turned from an object into JSON text."""
    items = opt_list(obj, "tool_calls", where) or []
    calls: list[ToolCall] = []
    for i, item in enumerate(items):
        call_where = field(field(where, "tool_calls"), i)
        call_obj = as_object(item, call_where)
        fn_where = field(call_where, "function")
        fn = opt_object(call_obj, "function", call_where)
        if fn is None:
            raise invalid(fn_where, "is required")
        name = req_str(fn, "name", fn_where)
        opt_int(fn, "index", fn_where, lo=0)
        args_where = field(fn_where, "arguments")
        arguments = opt_object(fn, "arguments", fn_where)
        call_id = opt_str(call_obj, "id", call_where) or ledger.mint()
        call = ToolCall(id=call_id, name=name, arguments=_json_text(arguments or {}, args_where))
        ledger.called(call)
        calls.append(call)
    return calls


def _json_text(arguments: JSONObject, param: str) -> str:
    try:
        return orjson.dumps(arguments).decode()
    except orjson.JSONEncodeError as exc:
        # orjson refuses integers beyond 64 bits and nesting deeper than 254 levels.
        raise invalid(param, f"cannot be represented as JSON arguments ({exc})") from None
