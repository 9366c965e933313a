"""The `tools` and `tool_choice` fields of a Messages request, as canonical tools.

Only client tools (a name, a description and a JSON Schema for the input) can be served: the
gateway's backends run no tools of their own, so Anthropic's server tools (web search, code
execution, …, marked by a versioned `type`) are refused rather than silently ignored.
"""

from __future__ import annotations

from typing import Any

from mindrouter.canonical import Tool, ToolChoice
from mindrouter.dialects.anthropic.fields import (
    as_bool,
    as_choice,
    as_list,
    as_object,
    as_str,
    child,
    invalid,
    required,
)

TOOL_CHOICE_TYPES = ("auto", "any", "tool", "none")


def decode_tools(value: object) -> list[Tool]:
    if value is None:
        return []
    tools: list[Tool] = []
    seen: set[str] = set()
    for i, item in enumerate(as_list(value, "tools")):
        path = child("tools", i)
        tool = _decode_tool(as_object(item, path), path)
        if tool.name in seen:
            raise invalid(child(path, "name"), f"tool names must be unique; {tool.name!r} repeats")
        seen.add(tool.name)
        tools.append(tool)
    return tools


def _decode_tool(obj: dict[str, Any], path: str) -> Tool:
    kind = obj.get("type")
    if kind is not None and kind != "custom":
        as_str(kind, child(path, "type"))
        raise invalid(
            child(path, "type"),
            f"server tools are not supported by this gateway ({kind!r}); "
            "define a client tool with name, description and input_schema",
        )
    name = as_str(required(obj, "name", path), child(path, "name"), non_empty=True)
    schema = as_object(required(obj, "input_schema", path), child(path, "input_schema"))
    description = obj.get("description")
    if description is not None:
        description = as_str(description, child(path, "description"))
    strict = obj.get("strict")
    if strict is not None:
        strict = as_bool(strict, child(path, "strict"))
    return Tool(name=name, description=description, parameters=schema, strict=strict)


def decode_tool_choice(value: object, tools: list[Tool]) -> ToolChoice | None:
    """auto → auto, any → required, tool → named, none → none."""
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
    if not tools:
        raise invalid("tool_choice.type", f"{kind!r} needs at least one tool in tools")
    if kind == "any":
        return ToolChoice(mode="required", parallel=parallel)
    name = as_str(required(obj, "name", "tool_choice"), "tool_choice.name", non_empty=True)
    if all(tool.name != name for tool in tools):
        raise invalid("tool_choice.name", f"no tool named {name!r} in tools")
    return ToolChoice(mode="named", name=name, parallel=parallel)
