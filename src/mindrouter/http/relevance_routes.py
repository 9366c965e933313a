"""Rerank and score entry points, under the paths vLLM, Jina and Cohere clients call.

`/v1/rerank`, `/rerank` and Cohere's `/v2/rerank` take one body (the Jina / Cohere shape);
`/v1/score` and `/score` take vLLM's. Errors are in the OpenAI shape, as on every path outside
`/anthropic/` and `/api/`.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from mindrouter.dialects import openai as dialect
from mindrouter.http.common import json_response
from mindrouter.http.entry import Entry
from mindrouter.pipeline.context import RequestContext
from mindrouter.pipeline.gateway import Gateway

RERANK_PATHS = ("/v1/rerank", "/rerank", "/v2/rerank")
SCORE_PATHS = ("/v1/score", "/score")


def relevance_routes(gateway: Gateway) -> list[BaseRoute]:
    entry = Entry(gateway, "openai")

    @entry.with_body
    async def rerank(ctx: RequestContext, body: Any) -> Response:
        req, options = dialect.decode_rerank_request(body)
        result = await gateway.score(ctx, req)
        return json_response(
            dialect.encode_rerank_response(
                result, req, options, request_id=ctx.request_id, model=req.model
            ),
            ctx,
        )

    @entry.with_body
    async def score(ctx: RequestContext, body: Any) -> Response:
        req = dialect.decode_score_request(body)
        result = await gateway.score(ctx, req)
        return json_response(
            dialect.encode_score_response(
                result, request_id=ctx.request_id, created=ctx.created, model=req.model
            ),
            ctx,
        )

    return [
        *(Route(path, rerank, methods=["POST"]) for path in RERANK_PATHS),
        *(Route(path, score, methods=["POST"]) for path in SCORE_PATHS),
    ]
