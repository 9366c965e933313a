"""The OpenAI Responses API under /v1/responses: create (unary or streamed), retrieve, delete,
list a response's input items, and count input tokens.

A response is stored for its owner unless the request says `store: false`; a follow-up that
names it in `previous_response_id` continues its conversation (the items it saw and its output)
after one read. Another user's response id answers exactly like an unknown one: 404.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
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
    entry = Entry(gateway, "openai")
    keep_any = settings.responses_retention_days > 0
    return [
        *_create_routes(gateway, store, entry, keep_any=keep_any),
        *_stored_routes(store, entry),
    ]


def _owner(ctx: RequestContext) -> int:
    assert ctx.principal is not None  # authenticate() has run
    return ctx.principal.user_id


async def _stored(
    store: SqlResponseStore, ctx: RequestContext, response_id: str, param: str | None
) -> StoredResponse:
    found = await store.get(_owner(ctx), response_id)
    if found is None:
        where = f"{param}: " if param else ""
        raise NotFound(f"{where}no response with id '{response_id}' was found")
    return found


async def _history(
    store: SqlResponseStore, ctx: RequestContext, body: object
) -> tuple[list[JSONObject], list[Message]]:
    """The items a request continues from (`previous_response_id`), raw and decoded."""
    previous = dialect.peek_previous(body)
    if previous is None:
        return [], []
    prior = await _stored(store, ctx, previous, "previous_response_id")
    items = [*prior.context, *prior.response.get("output", [])]
    return items, dialect.decode_input(items, "previous_response_id")


@dataclass(frozen=True, slots=True)
class _Keeper:
    """Stores a finished response for its owner, when it is to be kept and did not fail."""

    store: SqlResponseStore
    enabled: bool
    ctx: RequestContext
    response_id: str
    model: str
    context: list[JSONObject]
    prior_count: int

    async def __call__(self, response: JSONObject | None) -> None:
        if not self.enabled or response is None:
            return
        if response["status"] == "failed":
            return
        try:
            await self.store.save(
                StoredResponse(
                    id=self.response_id,
                    user_id=_owner(self.ctx),
                    created_at=utcnow(),
                    model=self.model,
                    input_items=self.context[self.prior_count :],
                    context=self.context,
                    response=response,
                )
            )
        except MindRouterError as exc:
            # The answer itself is good; only a later chain on it will not find it.
            log.warning("response not stored", response_id=self.response_id, error=exc.message)


def _create_routes(
    gateway: Gateway, store: SqlResponseStore, entry: Entry, *, keep_any: bool
) -> list[BaseRoute]:
    """POST /v1/responses and /v1/responses/input_tokens."""

    @entry.with_body
    async def create(ctx: RequestContext, body: Any) -> Response:
        prior_items, prior = await _history(store, ctx, body)
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
        keep = _Keeper(
            store,
            enabled=bool(options.store and keep_any),
            ctx=ctx,
            response_id=shape.id,
            model=req.model,
            context=[*prior_items, *dialect.normalize_items(body["input"])],
            prior_count=len(prior_items),
        )
        if req.stream:
            encoder = dialect.ResponsesStreamEncoder(shape)
            events = await gateway.open_stream(ctx, req)

            async def before_end() -> None:
                await keep(encoder.final)

            return stream_response(encoder, events, ctx, before_end=before_end)
        result = await gateway.generate(ctx, req)
        response = dialect.encode_response(result, shape, now=int(time.time()))
        await keep(response)
        return json_response(response, ctx)

    @entry.with_body
    async def input_tokens(ctx: RequestContext, body: Any) -> Response:
        if isinstance(body, dict) and body.get("input") is None:
            body = {**body, "input": []}
        _, prior = await _history(store, ctx, body)
        req, _ = dialect.decode_responses_request(body, prior)
        count = await gateway.count_tokens(ctx, req)
        return json_response({"object": "response.input_tokens", "input_tokens": count}, ctx)

    return [
        Route("/v1/responses", create, methods=["POST"]),
        Route("/v1/responses/input_tokens", input_tokens, methods=["POST"]),
    ]


def _stored_routes(store: SqlResponseStore, entry: Entry) -> list[BaseRoute]:
    """Retrieve, delete and list the input items of a stored response."""

    @entry.with_request
    async def retrieve(ctx: RequestContext, request: Request) -> Response:
        found = await _stored(store, ctx, request.path_params["response_id"], None)
        return json_response(found.response, ctx)

    @entry.with_request
    async def remove(ctx: RequestContext, request: Request) -> Response:
        response_id = request.path_params["response_id"]
        if not await store.delete(_owner(ctx), response_id):
            raise NotFound(f"no response with id '{response_id}' was found")
        return json_response(
            {"id": response_id, "object": "response.deleted", "deleted": True}, ctx
        )

    @entry.with_request
    async def input_items(ctx: RequestContext, request: Request) -> Response:
        found = await _stored(store, ctx, request.path_params["response_id"], None)
        return json_response(_page(found.input_items, request.query_params), ctx)

    return [
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
