"""Decode tool definitions and the tool choice, including the legacy `functions` form (§1.3).

Only function tools exist in the canonical form, so OpenAI's newer custom tools and the
`allowed_tools` choice are refused with a clear message rather than silently degraded: a client
that relies on them would otherwise get calls it did not allow.
"""

from __future__ import annotations

from typing import Literal

from mindrouter.canonical import Tool, ToolChoice
from mindrouter.dialects.openai.fields import (
    JSONObject,
    as_list,
    as_object,
    invalid,
    kind_of,
    opt_bool,
    opt_object,
    opt_str,
    path,
    req_str,
)

_MODES: dict[str, Literal["none", "auto", "required"]] = {
    "none": "none",
    "auto": "auto",
    "required": "required",
}


def decode_tools(body: JSONObject) -> tuple[list[Tool], ToolChoice | None]:
    """The tools and the choice among them; the choice is None when the client said nothing."""
    tools = _tools(body)
    legacy = body.get("functions")
    if legacy is not None:
        if body.get("tools") is not None:
            raise invalid("functions", "send either tools or the legacy functions, not both")
        tools = [
            _definition(as_object(item, path("functions", i)), path("functions", i))
            for i, item in enumerate(as_list(legacy, "functions"))
        ]
    _check_unique(tools, "functions" if legacy is not None else "tools")
    choice = _choice(body, tools)
    parallel = opt_bool(body, "parallel_tool_calls")
    if parallel is not None:
        choice = choice or ToolChoice(mode="auto")
        choice.parallel = parallel
    return tools, choice


def _tools(body: JSONObject) -> list[Tool]:
    value = body.get("tools")
    if value is None:
        return []
    tools = []
    for i, item in enumerate(as_list(value, "tools")):
        at = path("tools", i)
        tool = as_object(item, at)
        kind = tool.get("type")
        if kind != "function":
            shown = repr(kind) if isinstance(kind, str) else kind_of(kind)
            raise invalid(path(at, "type"), f"only 'function' tools are supported, got {shown}")
        fn = tool.get("function")
        if fn is None:
            raise invalid(path(at, "function"), "is required")
        tools.append(_definition(as_object(fn, path(at, "function")), path(at, "function")))
    return tools


def _check_unique(tools: list[Tool], key: str) -> None:
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        if tool.name in seen:
            where = path(path(key, i), "function.name" if key == "tools" else "name")
            raise invalid(where, f"duplicate tool name {tool.name!r}")
        seen.add(tool.name)


def _definition(fn: JSONObject, at: str) -> Tool:
    name = req_str(fn, "name", at, non_empty=True)
    description = opt_str(fn, "description", at)
    parameters = opt_object(fn, "parameters", at)
    strict = opt_bool(fn, "strict", at)
    if parameters is None:
        # OpenAI documents an omitted schema as a function that takes no arguments.
        parameters = {"type": "object", "properties": {}}
    return Tool(name=name, description=description, parameters=parameters, strict=strict)


def _choice(body: JSONObject, tools: list[Tool]) -> ToolChoice | None:
    key = "tool_choice" if body.get("tool_choice") is not None else "function_call"
    value = body.get(key)
    if value is None:
        return None
    if key == "function_call" and body.get("functions") is None:
        raise invalid(key, "is only allowed together with functions")
    if isinstance(value, str):
        if value not in _MODES or (key == "function_call" and value == "required"):
            allowed = "none, auto or required" if key == "tool_choice" else "none or auto"
            raise invalid(key, f"must be {allowed} or name a function; got {value!r}")
        if value == "required" and not tools:
            raise invalid(key, "'required' needs at least one tool in tools")
        return ToolChoice(mode=_MODES[value])
    spec = as_object(value, key)
    if key == "tool_choice":
        kind = spec.get("type")
        if kind != "function":
            shown = repr(kind) if isinstance(kind, str) else kind_of(kind)
            raise invalid(path(key, "type"), f"only 'function' choices are supported, got {shown}")
        fn_value = spec.get("function")
        if fn_value is None:
            raise invalid(path(key, "function"), "is required")
        name = req_str(as_object(fn_value, path(key, "function")), "name", path(key, "function"))
    else:
        name = req_str(spec, "name", key)
    if name not in {t.name for t in tools}:
        raise invalid(key, f"names the function {name!r}, which is not among the tools")
    return ToolChoice(mode="named", name=name)
