"""Error bodies for Ollama clients.

Ollama's error body is `{"error": "<text>"}` with a plain string. The ollama SDK stores whatever
`error` holds as the exception message, so an OpenAI-style object there would reach users as a
dict. The same shape is used for a failure in the middle of a stream, as its own NDJSON line.
The HTTP status is chosen by the http layer from the error's `kind`.
"""

from __future__ import annotations

from typing import Any

from mindrouter.errors import MindRouterError, ModelNotFound


def encode_error(error: MindRouterError) -> dict[str, Any]:
    if isinstance(error, ModelNotFound):
        # Ollama's own wording: scripts and tools match on it to decide to pull the model.
        return {"error": f'model "{error.model}" not found, try pulling it first'}
    return {"error": error.message}
