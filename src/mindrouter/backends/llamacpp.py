"""llama.cpp's `llama-server`: the OpenAI wire, reasoning in `reasoning_content`, and chat token
counting through `/apply-template` + `/tokenize`.

Configured URL: the server root, with or without a trailing `/v1`. The server holds one model,
but requests still name it (router mode serves several and picks by that name).
"""

from __future__ import annotations

from typing import Any, ClassVar

from mindrouter.backends.openai_compat import OpenAICompatAdapter, raise_unless_missing
from mindrouter.backends.openai_wire import LLAMACPP, Flavor, encode_chat
from mindrouter.canonical import ChatRequest
from mindrouter.errors import UpstreamRejected
from mindrouter.routing.backend_config import Engine

Json = dict[str, Any]


def encode_apply_template(req: ChatRequest) -> Json:
    chat = encode_chat(req, LLAMACPP, stream=False)
    body: Json = {"model": req.model, "messages": chat["messages"]}
    for key in ("tools", "chat_template_kwargs"):
        if key in chat:
            body[key] = chat[key]
    return body


class LlamaCppAdapter(OpenAICompatAdapter):
    engine: Engine = "llamacpp"
    flavor: ClassVar[Flavor] = LLAMACPP

    async def count_chat_tokens(self, req: ChatRequest) -> int | None:
        try:
            rendered = await self.http.post_json(
                "/apply-template", encode_apply_template(req), req.model
            )
        except UpstreamRejected as exc:
            raise_unless_missing(exc)
            return None
        prompt = rendered.get("prompt")
        if not isinstance(prompt, str):
            return None
        body = {"content": prompt, "add_special": True}
        data = await self.http.post_json("/tokenize", body, req.model)
        tokens = data.get("tokens")
        return len(tokens) if isinstance(tokens, list) else None
