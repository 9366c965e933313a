"""`ExactRoutes`: a request for a fixed path reaches its endpoint without the router, and gets
the answer the router would have given it, errors included."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.testclient import TestClient

from mindrouter.http.dispatch import ExactRoutes, exact_endpoints


class Refused(Exception):
    pass


async def where(request: Request) -> Response:
    """Which way the request came: the router leaves the matched route in the scope."""
    return JSONResponse(
        {"endpoint": "where", "router": "route" in request.scope, **request.path_params}
    )


async def shadowing(request: Request) -> Response:
    return JSONResponse({"endpoint": "shadowing", "router": "route" in request.scope})


async def refused(request: Request) -> Response:
    raise Refused("no")


async def broken(request: Request) -> Response:
    raise RuntimeError("a bug")


def sync_endpoint(request: Request) -> Response:
    return PlainTextResponse("sync")


async def on_refused(request: Request, exc: Exception) -> Response:
    return JSONResponse({"refused": str(exc)}, status_code=409)


ROUTES = [
    Route("/fixed", where, methods=["GET", "POST"]),
    Route("/items/{item}", where, methods=["GET"]),
    # The router takes the first full match, so "/shadow/deep" goes to this route.
    Route("/shadow/{rest:path}", shadowing, methods=["GET"]),
    Route("/shadow/deep", where, methods=["GET", "POST"]),
    Route("/refused", refused, methods=["POST"]),
    Route("/broken", broken, methods=["POST"]),
    Route("/sync", sync_endpoint, methods=["GET"]),
]


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    app = Starlette(routes=list(ROUTES))
    app.add_exception_handler(Refused, on_refused)
    app.add_middleware(ExactRoutes, routes=app.router.routes, handlers=app.exception_handlers)
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def test_the_table_holds_the_fixed_paths_the_router_would_pick_by_method_and_path() -> None:
    table = exact_endpoints(ROUTES)
    assert set(table) == {
        ("GET", "/fixed"),
        ("HEAD", "/fixed"),
        ("POST", "/fixed"),
        # GET and HEAD of "/shadow/deep" belong to the earlier route with a path parameter.
        ("POST", "/shadow/deep"),
        ("POST", "/refused"),
        ("POST", "/broken"),
    }
    assert table[("GET", "/fixed")] is where


def test_a_fixed_path_skips_the_router(client: TestClient) -> None:
    assert client.get("/fixed").json() == {"endpoint": "where", "router": False}
    assert client.post("/fixed").json() == {"endpoint": "where", "router": False}


def test_every_other_request_takes_the_router(client: TestClient) -> None:
    assert client.get("/items/7").json() == {"endpoint": "where", "router": True, "item": "7"}
    assert client.get("/shadow/deep").json() == {"endpoint": "shadowing", "router": True}
    assert client.post("/shadow/deep").json() == {"endpoint": "where", "router": False}
    assert client.get("/sync").text == "sync"
    assert client.delete("/fixed").status_code == 405
    assert client.get("/nowhere").status_code == 404
    # Under a root path, the router matches what follows it.
    with TestClient(client.app, root_path="/api") as under:
        assert under.get("/api/fixed").json() == {"endpoint": "where", "router": True}


def test_an_exception_gets_the_apps_handler_or_the_outermost_answer(client: TestClient) -> None:
    r = client.post("/refused")
    assert (r.status_code, r.json()) == (409, {"refused": "no"})
    assert client.post("/broken").status_code == 500
