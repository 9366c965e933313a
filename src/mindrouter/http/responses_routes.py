"""The OpenAI Responses API under /v1/responses: create (unary or streamed), retrieve, delete,
list a response's input items, and count input tokens.

A response is stored for its owner unless the request says `store: false`; a follow-up that
names it in `previous_response_id` continues its conversation (the items it saw and its output)
after one read. Another user's response id answers exactly like an unknown one: 404.
"""

from __future__ import annotations

import time
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from mindrouter.canonical import Message
from mindrouter.dialects import responses as dialect
from mindrouter.errors import InvalidRequest, MindRouterError, NotFound
from mindrouter.http.common import json_response, stream_response
from mindrouter.http.entry import Entry
from mindrouter.observability.logging import log
from mindrouter.pipeline.context import RequestContext
from mindrouter.pipeline.gateway import Gateway
from mindrouter.settings import Settings
from mindrouter.stores.sql.responses import SqlResponseStore, StoredResponse
from mindrouter.stores.sql.transactions import utcnow

JSONObject = dict[str, Any]
MAX_ITEMS_PAGE = 100


def responses_routes(
    gateway: Gateway, settings: Settings, store: SqlResponseStore
) -> list[BaseRoute]:
    keep_any = settings.responses_retention_days > 0
    entry = Entry(gateway, "openai")

    def owner(ctx: RequestContext) -> int:
        assert ctx.principal is not None  # authenticate() has run
        return ctx.principal.user_id

    async def stored(ctx: RequestContext, response_id: str, param: str | None) -> StoredResponse:
        found = await store.get(owner(ctx), response_id)
        if found is None:
            where = f"{param}: " if param else ""
            raise NotFound(f"{where}no response with id '{response_id}' was found")
        return found

    async def history(ctx: RequestContext, body: object) -> tuple[list[JSONObject], list[Message]]:
        """The items a request continues from (`previous_response_id`), raw and decoded."""
        previous = dialect.peek_previous(body)
        if previous is None:
            return [], []
        prior = await stored(ctx, previous, "previous_response_id")
        items = [*prior.context, *prior.response.get("output", [])]
        return items, dialect.decode_input(items, "previous_response_id")

    @entry.with_body
    async def create(ctx: RequestContext, body: Any) -> Response:
        prior_items, prior = await history(ctx, body)
        req, options = dialect.decode_responses_request(body, prior)
        if options.tools.dropped or options.ignored:
            log.debug(
                "responses fields not acted on",
                hosted_tools=options.tools.dropped,
                fields=options.ignored,
            )
        shape = dialect.ResponseShape(
            id=dialect.response_id_for(ctx.request_id),
            created_at=ctx.created,
            model=req.model,
            options=options,
        )
        context = [*prior_items, *dialect.normalize_items(body["input"])]

        async def keep(response: JSONObject | None) -> None:
            if not (options.store and keep_any) or response is None:
                return
            if response["status"] == "failed":
                return
            try:
                await store.save(
                    StoredResponse(
                        id=shape.id,
                        user_id=owner(ctx),
                        created_at=utcnow(),
                        model=req.model,
                        input_items=context[len(prior_items) :],
                        context=context,
                        response=response,
                    )
                )
            except MindRouterError as exc:
                # The answer itself is good; only a later chain on it will not find it.
                log.warning("response not stored", response_id=shape.id, error=exc.message)

        if req.stream:
            events = await gateway.open_chat_stream(ctx, req)
            encoder = dialect.ResponsesStreamEncoder(shape)

            async def before_end() -> None:
                await keep(encoder.final)

            return stream_response(encoder, events, ctx, before_end=before_end)
        result = await gateway.chat(ctx, req)
        response = dialect.encode_response(result, shape, now=int(time.time()))
        await keep(response)
        return json_response(response, ctx)

    @entry.with_request
    async def retrieve(ctx: RequestContext, request: Request) -> Response:
        found = await stored(ctx, request.path_params["response_id"], None)
        return json_response(found.response, ctx)

    @entry.with_request
    async def remove(ctx: RequestContext, request: Request) -> Response:
        response_id = request.path_params["response_id"]
        if not await store.delete(owner(ctx), response_id):
            raise NotFound(f"no response with id '{response_id}' was found")
        return json_response(
            {"id": response_id, "object": "response.deleted", "deleted": True}, ctx
        )

    @entry.with_request
    async def input_items(ctx: RequestContext, request: Request) -> Response:
        found = await stored(ctx, request.path_params["response_id"], None)
        return json_response(_page(found.input_items, request.query_params), ctx)

    @entry.with_body
    async def input_tokens(ctx: RequestContext, body: Any) -> Response:
        if isinstance(body, dict) and body.get("input") is None:
            body = {**body, "input": []}
        _, prior = await history(ctx, body)
        req, _ = dialect.decode_responses_request(body, prior)
        count = await gateway.count_tokens(ctx, req)
        return json_response({"object": "response.input_tokens", "input_tokens": count}, ctx)

    return [
        Route("/v1/responses", create, methods=["POST"]),
        Route("/v1/responses/input_tokens", input_tokens, methods=["POST"]),
        Route("/v1/responses/{response_id}", retrieve, methods=["GET"]),
        Route("/v1/responses/{response_id}", remove, methods=["DELETE"]),
        Route("/v1/responses/{response_id}/input_items", input_items, methods=["GET"]),
    ]


def _page(items: list[JSONObject], query: Any) -> JSONObject:
    """A page of input items: `order` (desc by default, as the API lists them), `limit`, `after`."""
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise InvalidRequest(f"order: must be asc or desc, got {order!r}", param="order")
    raw_limit = query.get("limit", "20")
    if not raw_limit.isdigit() or not 1 <= int(raw_limit) <= MAX_ITEMS_PAGE:
        raise InvalidRequest(f"limit: must be between 1 and {MAX_ITEMS_PAGE}", param="limit")
    ordered = items if order == "asc" else list(reversed(items))
    after = query.get("after")
    if after is not None:
        ids = [item.get("id") for item in ordered]
        if after not in ids:
            raise InvalidRequest(f"after: no input item with id {after!r}", param="after")
        ordered = ordered[ids.index(after) + 1 :]
    page = ordered[: int(raw_limit)]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": len(ordered) > len(page),
    }
