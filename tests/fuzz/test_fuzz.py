"""Fuzzing live gateways, one on SQLite and one on PostgreSQL: every public and admin route,
thousands of generated requests, each sent to both, and no 5xx, no reset, no hang, the dialect's
error shape on every 4xx, and no error in either gateway's log (see `probe.py` for what each
answer must be).

Each test draws `BUDGET[name]` requests from Hypothesis strategies of its route's request
schema (`openai_bodies.py`, `other_bodies.py`) or, for the admin API, from Schemathesis over the
OpenAPI document the gateway serves (`admin.py`). Generation is derandomized and uses no example
database, so every run sends the same requests. The last test of the module checks the campaign:
the count reached and every route of the app visited; run the module whole for it to pass.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, assume, example, given, settings
from hypothesis import strategies as st
from starlette.routing import Route

from tests.fuzz import admin, openai_bodies, other_bodies
from tests.fuzz.probe import Dialect, Volley
from tests.fuzz.target import Fleet, Target
from tests.fuzz.values import junk
from tests.fuzz.wire import (
    METHODS,
    Auth,
    admin_auth,
    auth,
    broken_bytes,
    content_type,
    query,
    segment,
)

# Each test takes 5–60 s on the shared 2-core machine; the first one also starts the gateways.
pytestmark = pytest.mark.timeout(300)

# Requests per test and database (each test sends at least this many).
BUDGET = {
    "openai_chat": 700,
    "openai_completions": 250,
    "openai_embeddings": 200,
    "responses": 400,
    "responses_input_tokens": 120,
    "stored_responses": 120,
    "anthropic_messages": 700,
    "anthropic_count_tokens": 240,
    "ollama_chat": 400,
    "ollama_generate": 250,
    "ollama_embed": 200,
    "ollama_show": 60,
    "relevance": 360,
    "reads": 250,
    "broken_bodies": 400,
    "unknown_paths": 120,
    "admin_openapi": 800,
    "admin_views": 120,
}
# Hypothesis examples per test: several tests send each body to more than one route.
PATHS_PER_EXAMPLE = {"anthropic_messages": 2, "anthropic_count_tokens": 2, "relevance": 2}
# The acceptance figure: generated requests per run, on each database.
MINIMUM_REQUESTS = 5000
sent_by_test: dict[str, int] = {}


def fuzz(name: str) -> settings:
    return settings(
        max_examples=BUDGET[name] // PATHS_PER_EXAMPLE.get(name, 1),
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
    )


def run(name: str, volley: Volley, test: Any) -> None:
    """Runs the Hypothesis test `test`; records and checks how many requests it sent."""
    before = volley.sent()
    fuzz(name)(test)()
    sent = volley.sent() - before
    sent_by_test[name] = sent
    assert sent >= BUDGET[name], f"{name}: {sent} requests, {BUDGET[name]} planned"


def post_body(
    name: str, volley: Volley, paths: list[str], bodies: st.SearchStrategy[Any], dialect: Dialect
) -> None:
    @given(body=bodies, credentials=auth(dialect))
    def test(body: Any, credentials: Auth) -> None:
        for path in paths:
            volley.send("POST", path, json_body=body, auth=credentials)

    run(name, volley, test)


# -- the dialects' request schemas ----------------------------------------------------------------


def test_openai_chat(volley: Volley) -> None:
    paths = ["/v1/chat/completions"]
    post_body("openai_chat", volley, paths, openai_bodies.chat, "openai")


def test_openai_completions(volley: Volley) -> None:
    paths = ["/v1/completions"]
    post_body("openai_completions", volley, paths, openai_bodies.completion, "openai")


def test_openai_embeddings(volley: Volley) -> None:
    paths = ["/v1/embeddings"]
    post_body("openai_embeddings", volley, paths, openai_bodies.embedding, "openai")


def test_responses(volley: Volley) -> None:
    @given(body=other_bodies.responses, credentials=auth())
    def test(body: Any, credentials: Auth) -> None:
        answers = volley.send("POST", "/v1/responses", json_body=body, auth=credentials)
        for p, r in zip(volley.probes, answers, strict=True):
            if r.status_code == 200 and r.headers["content-type"].startswith("application/json"):
                p.response_ids.append(r.json()["id"])

    run("responses", volley, test)


def test_responses_input_tokens(volley: Volley) -> None:
    paths = ["/v1/responses/input_tokens"]
    bodies = other_bodies.responses_input_tokens
    post_body("responses_input_tokens", volley, paths, bodies, "openai")


def test_stored_responses(volley: Volley) -> None:
    stored = {p.target.name: p.response_ids[:50] for p in volley.probes}
    # An index into each target's own stored responses, or an id no response has.
    ids = st.one_of(st.integers(0, 49), segment)
    routes = [
        ("GET", "/v1/responses/{response_id}", ""),
        ("GET", "/v1/responses/{response_id}/input_items", "/input_items"),
        ("DELETE", "/v1/responses/{response_id}", ""),
    ]

    @given(route=st.sampled_from(routes), rid=ids, params=query, credentials=auth())
    def test(route: tuple[str, str, str], rid: int | str, params: Any, credentials: Auth) -> None:
        method, template, tail = route

        def path(t: Target) -> str:
            own = stored[t.name]
            known = own[rid % len(own)] if isinstance(rid, int) and own else rid
            return f"/v1/responses/{known}{tail}"

        volley.send(method, path, route=template, params=params, auth=credentials)

    run("stored_responses", volley, test)


def test_anthropic_messages(volley: Volley) -> None:
    paths = ["/anthropic/v1/messages", "/v1/messages"]
    bodies = other_bodies.anthropic_messages
    post_body("anthropic_messages", volley, paths, bodies, "anthropic")


def test_anthropic_count_tokens(volley: Volley) -> None:
    paths = ["/anthropic/v1/messages/count_tokens", "/v1/messages/count_tokens"]
    bodies = other_bodies.anthropic_count_tokens
    post_body("anthropic_count_tokens", volley, paths, bodies, "anthropic")


def test_ollama_chat(volley: Volley) -> None:
    post_body("ollama_chat", volley, ["/api/chat"], other_bodies.ollama_chat, "ollama")


def test_ollama_generate(volley: Volley) -> None:
    paths = ["/api/generate"]
    post_body("ollama_generate", volley, paths, other_bodies.ollama_generate, "ollama")


def test_ollama_embed(volley: Volley) -> None:
    bodies = st.one_of(
        st.tuples(st.just("/api/embed"), other_bodies.ollama_embed),
        st.tuples(st.just("/api/embeddings"), other_bodies.ollama_embeddings),
    )

    @given(pair=bodies, credentials=auth("ollama"))
    def test(pair: tuple[str, Any], credentials: Auth) -> None:
        volley.send("POST", pair[0], json_body=pair[1], auth=credentials)

    run("ollama_embed", volley, test)


def test_ollama_show(volley: Volley) -> None:
    post_body("ollama_show", volley, ["/api/show"], other_bodies.ollama_show, "ollama")


def test_relevance(volley: Volley) -> None:
    bodies = st.one_of(
        st.tuples(st.just(["/v1/rerank", "/rerank", "/v2/rerank"]), openai_bodies.rerank),
        st.tuples(st.just(["/v1/score", "/score"]), openai_bodies.score),
    )

    @given(pair=bodies, credentials=auth())
    def test(pair: tuple[list[str], Any], credentials: Auth) -> None:
        for path in pair[0]:
            volley.send("POST", path, json_body=pair[1], auth=credentials)

    run("relevance", volley, test)


# -- everything else a client can send ------------------------------------------------------------

READS = [
    "/",
    "/healthz",
    "/readyz",
    "/metrics",
    "/openapi.json",
    "/v1/models",
    "/anthropic/v1/models",
    "/api/tags",
    "/api/ps",
    "/api/version",
    "/v1/usage",
]


def test_reads(volley: Volley) -> None:
    model = st.one_of(st.sampled_from(openai_bodies.CHAT_MODELS), segment)
    paths = st.one_of(
        st.sampled_from(READS).map(lambda p: (p, p)),
        model.map(lambda m: (f"/v1/models/{m}", "/v1/models/{model_id:path}")),
    )
    credentials = st.one_of(admin_auth(), auth("anthropic"), st.just(Auth("metrics")))

    @given(path=paths, method=st.sampled_from(["GET", "GET", "HEAD"]), params=query, a=credentials)
    def test(path: tuple[str, str], method: str, params: Any, a: Auth) -> None:
        volley.send(method, path[0], route=path[1], params=params, auth=a)

    # Every path once for certain, whatever the generation favours.
    for p in READS:
        test = example(path=(p, p), method="GET", params=[], a=Auth("user"))(test)

    run("reads", volley, test)


def _routes(fleet: Fleet) -> list[Route]:
    """The app's routes and the admin API's, which answer what the app's do not match."""
    routes = [*fleet.app.router.routes, *fleet.app.state.admin_api.routes]
    return [r for r in routes if isinstance(r, Route)]


def _post_routes(fleet: Fleet) -> list[str]:
    return sorted(
        r.path for r in _routes(fleet) if "POST" in (r.methods or ()) and "{" not in r.path
    )


def test_broken_bodies(fleet: Fleet, volley: Volley) -> None:
    paths = _post_routes(fleet)

    @given(
        path=st.sampled_from(paths),
        method=st.sampled_from(["POST"] * 6 + METHODS),
        body=st.one_of(openai_bodies.chat, other_bodies.anthropic_messages, junk).flatmap(
            broken_bytes
        ),
        credentials=admin_auth(),
        kind=content_type,
    )
    def test(path: str, method: str, body: bytes, credentials: Auth, kind: str | None) -> None:
        headers = {"content-type": kind} if kind else {}
        volley.send(method, path, content=body, headers=headers, auth=credentials)

    run("broken_bodies", volley, test)


def test_unknown_paths(volley: Volley) -> None:
    prefixes = ["", "/v1", "/v2", "/api", "/anthropic", "/anthropic/v1", "/admin", "/admin/keys"]

    @given(
        prefix=st.sampled_from(prefixes),
        tail=st.lists(segment, min_size=1, max_size=3),
        method=st.sampled_from(METHODS),
        credentials=admin_auth(),
    )
    def test(prefix: str, tail: list[str], method: str, credentials: Auth) -> None:
        path = prefix + "/" + "/".join(tail)
        volley.send(method, path, route="(unknown)", auth=credentials)

    run("unknown_paths", volley, test)


# -- the admin API -------------------------------------------------------------------------------


def test_admin_openapi(fleet: Fleet, volley: Volley) -> None:
    @given(case=admin.cases(fleet.targets[0]))
    def test(case: Any) -> None:
        assume(not any(admin.touches_protected(case, t) for t in fleet.targets))
        request = admin.as_request(case)
        volley.send(case.method.upper(), request.pop("path"), auth=Auth("admin"), **request)

    run("admin_openapi", volley, test)


def test_admin_views(fleet: Fleet, volley: Volley) -> None:
    names = st.one_of(segment, st.just("no-such-backend"))
    routes = st.one_of(
        names.map(lambda n: ("GET", f"/admin/usage/{n}", "/admin/usage/{user}")),
        st.just(("GET", "/admin/usage/tester", "/admin/usage/{user}")),
        st.just(("GET", "/admin/routing/backends", "/admin/routing/backends")),
        st.just(("GET", "/admin/queue", "/admin/queue")),
        # Draining a configured backend would turn the other tests' requests away: only names
        # no backend has are drained; undraining is harmless for any name.
        names.map(
            lambda n: (
                "POST",
                f"/admin/routing/backends/{n}/drain",
                "/admin/routing/backends/{name}/drain",
            )
        ),
        st.sampled_from(["vllm-1", "ollama-1", "nope"]).map(
            lambda n: (
                "POST",
                f"/admin/routing/backends/{n}/undrain",
                "/admin/routing/backends/{name}/undrain",
            )
        ),
    )

    protected = set.union(*(t.protected for t in fleet.targets))

    @given(route=routes, params=query, credentials=admin_auth())
    def test(route: tuple[str, str, str], params: Any, credentials: Auth) -> None:
        method, path, template = route
        assume(not path.endswith("/drain") or path.split("/")[4] not in protected)
        volley.send(method, path, route=template, params=params, auth=credentials)

    run("admin_views", volley, test)


# -- the campaign ---------------------------------------------------------------------------------


def app_routes(fleet: Fleet) -> set[str]:
    plain = {r.path for r in _routes(fleet)}
    return plain | {op.path for op in admin.operations(fleet.targets[0])}


def test_campaign(fleet: Fleet, volley: Volley) -> None:
    missing = sorted(set(BUDGET) - set(sent_by_test))
    assert not missing, f"run the module whole; not run: {missing}"
    routes = app_routes(fleet)
    for p in volley.probes:
        total = sum(p.sent.values())
        print(f"\n{p.target.name}: {total} requests, statuses {dict(sorted(p.statuses.items()))}")
        assert total >= MINIMUM_REQUESTS, f"{p.target.name}: {total} requests"
        missed = routes - set(p.sent)
        assert not missed, f"{p.target.name}: routes no request reached: {sorted(missed)}"
        errors = p.target.errors()
        assert not errors, f"{p.target.name}'s log:\n" + "\n".join(errors[:20])
