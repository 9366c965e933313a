"""Any OpenAI-compatible server: standard fields only, `reasoning_effort` for reasoning, an
optional bearer key, and no tokenizer endpoint.

Configured URL: either the API base ending in a version segment (`https://host/v1`,
`https://host/api/v4`), used as it is, or a server root, to which `/v1` is appended.
"""

from __future__ import annotations

import re
from typing import ClassVar

from mindrouter.backends.openai_compat import OpenAICompatAdapter
from mindrouter.backends.openai_wire import GENERIC, Flavor
from mindrouter.routing.backend_config import Engine

_VERSIONED = re.compile(r"/v\d+$")


class OpenAIAdapter(OpenAICompatAdapter):
    engine: Engine = "openai"
    flavor: ClassVar[Flavor] = GENERIC

    @staticmethod
    def layout(url: str) -> tuple[str, str]:
        base = url.rstrip("/")
        return (base, "") if _VERSIONED.search(base) else (base, "/v1")
