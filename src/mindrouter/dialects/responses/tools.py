"""Decode Responses tools and the tool choice.

Responses tools are flat (`{"type": "function", "name", "parameters"}`), may be grouped in
`namespace` entries (flattened here into their function tools, remembering the namespace so a
call is reported back under it), and include OpenAI's hosted tools (web search, file search,
computer use, code interpreter, ...). An engine behind the gateway cannot run hosted tools, so
those that are merely offered are left out of what the engine sees; a `tool_choice` that forces
one is refused, because the client asked for something that cannot happen.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from mindrouter.canonical import Tool, ToolChoice
from mindrouter.dialects.openai.fields import (
    JSONObject,
    as_list,
    as_object,
    invalid,
    kind_of,
    opt_bool,
    opt_str,
    path,
    req_str,
)

HOSTED_TOOLS = frozenset(
    {
        "web_search",
        "web_search_preview",
        "web_search_2025_08_26",
        "web_search_preview_2025_03_11",
        "file_search",
        "computer",
        "computer_use",
        "computer_use_preview",
        "code_interpreter",
        "image_generation",
        "mcp",
        "local_shell",
        "shell",
        "apply_patch",
        "custom",
        "tool_search",
        "programmatic_tool_calling",
    }
)
_MODES: dict[str, Literal["none", "auto", "required"]] = {
    "none": "none",
    "auto": "auto",
    "required": "required",
}


@dataclass(slots=True)
class DecodedTools:
    tools: list[Tool] = field(default_factory=list)
    choice: ToolChoice | None = None
    namespaces: dict[str, str] = field(default_factory=dict)  # tool name -> its namespace
    dropped: list[str] = field(default_factory=list)  # hosted tools left out, by type
    echo: list[JSONObject] = field(
        default_factory=list
    )  # the function tools, as a response lists them
    choice_echo: object = "auto"


def decode_tools(body: JSONObject) -> DecodedTools:
    out = DecodedTools()
    value = body.get("tools")
    if value is not None:
        for i, item in enumerate(as_list(value, "tools")):
            _tool(as_object(item, path("tools", i)), path("tools", i), out, namespace=None)
    seen: set[str] = set()
    for tool in out.tools:
        if tool.name in seen:
            raise invalid("tools", f"duplicate tool name {tool.name!r}")
        seen.add(tool.name)
    out.choice, out.choice_echo = _choice(body, out)
    parallel = opt_bool(body, "parallel_tool_calls")
    if parallel is not None:
        out.choice = out.choice or ToolChoice(mode="auto")
        out.choice.parallel = parallel
    return out


def _tool(tool: JSONObject, at: str, out: DecodedTools, namespace: str | None) -> None:
    kind = tool.get("type")
    if kind == "function":
        name = req_str(tool, "name", at, non_empty=True)
        parameters = tool.get("parameters")
        if parameters is None:
            parameters = {"type": "object", "properties": {}}
        elif not isinstance(parameters, dict):
            raise invalid(path(at, "parameters"), f"must be an object, got {kind_of(parameters)}")
        description = opt_str(tool, "description", at)
        strict = opt_bool(tool, "strict", at)
        out.tools.append(Tool(name, description, parameters, strict))
        if namespace is not None:
            out.namespaces[name] = namespace
        out.echo.append(
            {
                "type": "function",
                "name": name,
                "description": description,
                "parameters": parameters,
                "strict": strict,
            }
        )
    elif kind == "namespace" and namespace is None:
        group = req_str(tool, "name", at, non_empty=True)
        for j, inner in enumerate(as_list(tool.get("tools"), path(at, "tools"))):
            _tool(
                as_object(inner, path(path(at, "tools"), j)), path(path(at, "tools"), j), out, group
            )
    elif isinstance(kind, str) and kind in HOSTED_TOOLS:
        out.dropped.append(kind)
    else:
        shown = repr(kind) if isinstance(kind, str) else kind_of(kind)
        raise invalid(path(at, "type"), f"unknown tool type {shown}")


def _choice(body: JSONObject, tools: DecodedTools) -> tuple[ToolChoice | None, object]:
    value = body.get("tool_choice")
    if value is None:
        return None, "auto"
    if isinstance(value, str):
        if value not in _MODES:
            raise invalid("tool_choice", f"must be none, auto or required; got {value!r}")
        if value == "required" and not tools.tools:
            raise invalid("tool_choice", "'required' needs at least one function tool")
        return ToolChoice(mode=_MODES[value]), value
    spec = as_object(value, "tool_choice")
    kind = spec.get("type")
    names = {t.name for t in tools.tools}
    if kind == "function":
        name = req_str(spec, "name", "tool_choice", non_empty=True)
        if name not in names:
            raise invalid("tool_choice.name", f"names {name!r}, which is not among the tools")
        return ToolChoice(mode="named", name=name), {"type": "function", "name": name}
    if kind == "allowed_tools":
        return _allowed(spec, tools, names), spec
    if isinstance(kind, str) and kind in HOSTED_TOOLS:
        raise invalid(
            "tool_choice", f"forces the hosted tool {kind!r}, which this gateway cannot run"
        )
    shown = repr(kind) if isinstance(kind, str) else kind_of(kind)
    raise invalid("tool_choice.type", f"must be function or allowed_tools; got {shown}")


def _allowed(spec: JSONObject, tools: DecodedTools, names: set[str]) -> ToolChoice:
    """`allowed_tools` narrows the tools the engine is offered to those listed."""
    mode = opt_str(spec, "mode", "tool_choice") or "auto"
    if mode not in ("auto", "required"):
        raise invalid("tool_choice.mode", f"must be auto or required; got {mode!r}")
    allowed: set[str] = set()
    for j, item in enumerate(as_list(spec.get("tools"), "tool_choice.tools")):
        at = path("tool_choice.tools", j)
        entry = as_object(item, at)
        if entry.get("type") != "function":
            continue  # hosted tools allowed here are not offered anyway
        name = req_str(entry, "name", at, non_empty=True)
        if name not in names:
            raise invalid(path(at, "name"), f"names {name!r}, which is not among the tools")
        allowed.add(name)
    tools.tools = [t for t in tools.tools if t.name in allowed]
    if mode == "required" and not tools.tools:
        raise invalid("tool_choice", "'required' needs at least one allowed function tool")
    return ToolChoice(mode=_MODES[mode])
