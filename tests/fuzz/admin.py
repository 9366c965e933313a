"""The admin API as Schemathesis sees it: every operation of the OpenAPI document the gateway
serves to admin keys, with valid and invalid requests generated from its schemas.

Cases that would change or delete what the other fuzzing needs (the two users, their group, the
configured backends and models, the two keys) are left out; everything else the admin API
offers is fair game, creations and deletions included. Backends created or changed here are
live (the gateway probes them), so every backend URL the API would accept is pointed at a
closed port on this machine: no request leaves it.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import unquote

import httpx
import schemathesis
from hypothesis import strategies as st
from schemathesis import Case, GenerationMode

from tests.fuzz.target import Target


def operations(t: Target) -> list[Any]:
    doc = httpx.get(
        t.url + "/openapi.json", headers={"Authorization": f"Bearer {t.admin_key}"}
    ).raise_for_status()
    schema = schemathesis.openapi.from_dict(doc.json())
    return [result.ok() for result in schema.get_all_operations()]


def cases(t: Target) -> st.SearchStrategy[Case]:
    return st.one_of(
        [
            op.as_strategy(mode)
            for op in operations(t)
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
        ]
    )


def touches_protected(case: Case, t: Target) -> bool:
    if case.method.upper() in ("GET", "HEAD"):
        return False
    values = (case.path_parameters or {}).values()
    return any(unquote(str(v)) in t.protected or str(v) in t.protected for v in values)


def _params(params: Any) -> list[tuple[str, str]]:
    """Query parameters as the wire carries them: nested values flattened to text."""
    pairs: list[tuple[str, str]] = []
    for name, value in (params or {}).items():
        values = value if isinstance(value, list) else [value]
        pairs += [(str(name), "" if v is None else str(v)) for v in values]
    return pairs


BASE = "http://gateway"
# Port 9 (discard) is closed here: a backend there is simply down.
NOWHERE = "http://127.0.0.1:9"
_ACCEPTED_URL = re.compile(r"^https?://")


def _local_urls(body: Any) -> Any:
    url = body.get("url") if isinstance(body, dict) else None
    if isinstance(url, str) and _ACCEPTED_URL.match(url):
        return {**body, "url": NOWHERE}
    return body


def as_request(case: Case) -> dict[str, Any]:
    """The case as arguments of `Volley.send` (the key is added per target)."""
    kwargs = case.as_transport_kwargs(base_url=BASE)
    headers = {k: str(v) for k, v in kwargs.get("headers", {}).items()}
    out: dict[str, Any] = {
        "path": str(kwargs["url"])[len(BASE) :],
        "headers": headers,
        "params": _params(kwargs.get("params")),
        "route": case.operation.path,
    }
    if "json" in kwargs:
        out["json_body"] = _local_urls(kwargs["json"])
    elif kwargs.get("data") is not None:
        data = kwargs["data"]
        raw = data if isinstance(data, bytes) else str(data).encode()
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = None
        # Bytes that happen to be a backend with an acceptable URL get the local one too.
        if isinstance(parsed, dict) and _local_urls(parsed) is not parsed:
            raw = json.dumps(_local_urls(parsed)).encode()
        out["content"] = raw
    return out
