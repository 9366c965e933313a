"""The `tools` and `tool_choice` fields of a Messages request, as canonical tools.

Only client tools (a name, a description and a JSON Schema for the input) can be served: the
gateway's backends run no tools of their own. Anthropic's server tools (web search, code
execution, MCP toolsets, …, marked by a versioned `type`) that are merely offered are left out of
what the engine sees and reported as dropped; a `tool_choice` that forces one is an error, since
the request could not be answered as asked. Client-tool options that only steer Anthropic's own
serving (`defer_loading`, `allowed_callers`, `eager_input_streaming`, `input_examples`,
`cache_control`) are ignored: every tool is offered to the engine, deferred or not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mindrouter.canonical import Tool, ToolChoice
from mindrouter.dialects.anthropic.fields import (
    Dropped,
    as_bool,
    as_choice,
    as_list,
    as_object,
    as_str,
    check_cache_control,
    child,
    invalid,
    required,
)

TOOL_CHOICE_TYPES = ("auto", "any", "tool", "none")


@dataclass(slots=True)
class Tools:
    """The client tools to offer, and the names of the server tools left out."""

    tools: list[Tool] = field(default_factory=list)
    server_tools: set[str] = field(default_factory=set)


def decode_tools(value: object, dropped: Dropped) -> Tools:
    decoded = Tools()
    if value is None:
        return decoded
    seen: set[str] = set()
    for i, item in enumerate(as_list(value, "tools")):
        path = child("tools", i)
        obj = as_object(item, path)
        check_cache_control(obj, path)
        kind = obj.get("type")
        if kind is not None and as_str(kind, child(path, "type")) != "custom":
            # A server tool: a name when it has one (MCP toolsets name a server instead).
            name = obj.get("name")
            decoded.server_tools.add(name if isinstance(name, str) else kind)
            dropped.add(path)
            continue
        tool = _decode_tool(obj, path)
        if tool.name in seen:
            raise invalid(child(path, "name"), f"tool names must be unique; {tool.name!r} repeats")
        seen.add(tool.name)
        decoded.tools.append(tool)
    return decoded


def _decode_tool(obj: dict[str, Any], path: str) -> Tool:
    name = as_str(required(obj, "name", path), child(path, "name"), non_empty=True)
    schema = as_object(required(obj, "input_schema", path), child(path, "input_schema"))
    description = obj.get("description")
    if description is not None:
        description = as_str(description, child(path, "description"))
    strict = obj.get("strict")
    if strict is not None:
        strict = as_bool(strict, child(path, "strict"))
    for flag in ("defer_loading", "eager_input_streaming"):
        if obj.get(flag) is not None:
            as_bool(obj[flag], child(path, flag))
    return Tool(name=name, description=description, parameters=schema, strict=strict)


def decode_tool_choice(value: object, decoded: Tools) -> ToolChoice | None:
    """auto → auto, any → required, tool → named, none → none."""
    tools = decoded.tools
    if value is None:
        return None
    obj = as_object(value, "tool_choice")
    kind = as_choice(required(obj, "type", "tool_choice"), "tool_choice.type", TOOL_CHOICE_TYPES)
    parallel: bool | None = None
    disable = obj.get("disable_parallel_tool_use")
    if disable is not None:
        parallel = not as_bool(disable, "tool_choice.disable_parallel_tool_use")
    if kind == "none":
        return ToolChoice(mode="none", parallel=parallel)
    if kind == "auto":
        return ToolChoice(mode="auto", parallel=parallel)
    forced = obj.get("name") if kind == "tool" else None
    if isinstance(forced, str) and forced in decoded.server_tools:
        raise invalid(
            "tool_choice.name",
            f"{forced!r} is a server tool, which this gateway cannot run; "
            "define a client tool with name, description and input_schema",
        )
    if not tools:
        raise invalid("tool_choice.type", f"{kind!r} needs at least one tool in tools")
    if kind == "any":
        return ToolChoice(mode="required", parallel=parallel)
    name = as_str(required(obj, "name", "tool_choice"), "tool_choice.name", non_empty=True)
    if all(tool.name != name for tool in tools):
        raise invalid("tool_choice.name", f"no tool named {name!r} in tools")
    return ToolChoice(mode="named", name=name, parallel=parallel)
