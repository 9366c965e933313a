"""What every dialect's field readers share: naming a JSON value's kind and building the error.

Each dialect keeps its own path style (OpenAI `messages[2].content`, Anthropic
`messages.2.content`, ...) because clients compare them with that API's own messages.
"""

from __future__ import annotations

from mindrouter.errors import InvalidRequest


def kind_of(value: object) -> str:
    """The JSON name of a value's type, for messages such as "expected a string, got an array"."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def invalid(param: str, problem: str) -> InvalidRequest:
    """An InvalidRequest whose message starts with the parameter it is about."""
    return InvalidRequest(f"{param}: {problem}", param=param)
