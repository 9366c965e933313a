"""How to call a model from each SDK, with the gateway's URL filled in: plain text, shown
escaped in a <pre> and copied by the page's copy button."""

from __future__ import annotations

import json
from dataclasses import dataclass

from mindrouter.routing.catalog import ModelSpec

KEY = "YOUR_KEY"


@dataclass(frozen=True, slots=True)
class Snippet:
    sdk: str
    code: str


def _chat(url: str, model: str) -> list[Snippet]:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "Hello"}]})
    return [
        Snippet(
            "OpenAI (Python)",
            "from openai import OpenAI\n\n"
            f'client = OpenAI(base_url="{url}/v1", api_key="{KEY}")\n'
            "reply = client.chat.completions.create(\n"
            f'    model="{model}", messages=[{{"role": "user", "content": "Hello"}}]\n'
            ")\n"
            "print(reply.choices[0].message.content)",
        ),
        Snippet(
            "Anthropic (Python)",
            "from anthropic import Anthropic\n\n"
            f'client = Anthropic(base_url="{url}/anthropic", api_key="{KEY}")\n'
            "reply = client.messages.create(\n"
            f'    model="{model}", max_tokens=512,\n'
            '    messages=[{"role": "user", "content": "Hello"}],\n'
            ")\n"
            "print(reply.content[0].text)",
        ),
        Snippet(
            "Ollama (Python)",
            "from ollama import Client\n\n"
            f'client = Client(host="{url}", headers={{"Authorization": "Bearer {KEY}"}})\n'
            "reply = client.chat(\n"
            f'    model="{model}", messages=[{{"role": "user", "content": "Hello"}}]\n'
            ")\n"
            "print(reply.message.content)",
        ),
        Snippet(
            "curl",
            f"curl {url}/v1/chat/completions \\\n"
            f'  -H "Authorization: Bearer {KEY}" -H "Content-Type: application/json" \\\n'
            f"  -d '{body}'",
        ),
    ]


def _embedding(url: str, model: str) -> list[Snippet]:
    body = json.dumps({"model": model, "input": "Hello"})
    return [
        Snippet(
            "OpenAI (Python)",
            "from openai import OpenAI\n\n"
            f'client = OpenAI(base_url="{url}/v1", api_key="{KEY}")\n'
            f'vector = client.embeddings.create(model="{model}", input="Hello").data[0].embedding',
        ),
        Snippet(
            "Ollama (Python)",
            "from ollama import Client\n\n"
            f'client = Client(host="{url}", headers={{"Authorization": "Bearer {KEY}"}})\n'
            f'vectors = client.embed(model="{model}", input="Hello").embeddings',
        ),
        Snippet(
            "curl",
            f"curl {url}/v1/embeddings \\\n"
            f'  -H "Authorization: Bearer {KEY}" -H "Content-Type: application/json" \\\n'
            f"  -d '{body}'",
        ),
    ]


def _rerank(url: str, model: str) -> list[Snippet]:
    body = json.dumps(
        {"model": model, "query": "capital of France", "documents": ["Paris", "Rome"]}
    )
    return [
        Snippet(
            "curl",
            f"curl {url}/v1/rerank \\\n"
            f'  -H "Authorization: Bearer {KEY}" -H "Content-Type: application/json" \\\n'
            f"  -d '{body}'",
        )
    ]


def snippets_for(spec: ModelSpec, url: str) -> list[Snippet]:
    if spec.is_reranker:
        return _rerank(url, spec.name)
    if spec.is_embedding:
        return _embedding(url, spec.name)
    return _chat(url, spec.name)
