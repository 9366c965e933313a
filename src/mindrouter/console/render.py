"""Server-side rendering: the Jinja2 templates (every value escaped unless a template says
otherwise, and none does), the formats the pages share, and the per-day chart as plain SVG."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from starlette.requests import Request
from starlette.responses import HTMLResponse

from mindrouter.console.guard import csrf_token
from mindrouter.stores.sql.accounts import ConsoleAccount

HERE = Path(__file__).parent
TEMPLATES = Environment(
    loader=FileSystemLoader(HERE / "templates"),
    autoescape=True,
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def number(value: int | float | None) -> str:
    if value is None:
        return "–"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.2f}"
    return f"{int(value):,}"


def when(value: datetime | None) -> str:
    return "–" if value is None else value.strftime("%Y-%m-%d %H:%M UTC")


def seconds(ms: float | None) -> str:
    if ms is None:
        return "–"
    return f"{ms / 1000:.2f} s" if ms >= 100 else f"{ms:.0f} ms"


def pretty(value: Any) -> str:
    """JSON (a message history) laid out for reading; the template escapes it like any text."""
    if value is None:
        return "–"
    return json.dumps(value, indent=2, ensure_ascii=False)


TEMPLATES.filters.update(number=number, when=when, seconds=seconds, pretty=pretty)


def page(
    request: Request,
    template: str,
    account: ConsoleAccount | None,
    status_code: int = 200,
    **context: Any,
) -> HTMLResponse:
    flash = request.session.pop("flash", None)
    html = TEMPLATES.get_template(template).render(
        account=account,
        csrf=csrf_token(request),
        path=request.url.path,
        flash=flash,
        **context,
    )
    return HTMLResponse(html, status_code=status_code)


def flash(request: Request, message: str) -> None:
    """A one-line notice shown on the next page."""
    request.session["flash"] = message


@dataclass(frozen=True, slots=True)
class Bar:
    x: float
    y: float
    height: float
    day: date
    tokens: int
    label: str  # the axis label under the bar, or "" between labels


@dataclass(frozen=True, slots=True)
class Chart:
    width: int
    height: int
    bars: list[Bar]
    bar_width: float
    peak: int
    total: int


def day_chart(tokens_by_day: dict[date, int], last: date, days: int = 30) -> Chart:
    """One bar per day for the `days` days up to `last`, scaled to the busiest day."""
    width, height, top = 720, 160, 8
    first = last - timedelta(days=days - 1)
    peak = max([*tokens_by_day.values(), 1])
    slot = width / days
    bars = []
    for i in range(days):
        day = first + timedelta(days=i)
        tokens = tokens_by_day.get(day, 0)
        h = (height - top) * tokens / peak
        # A label a week, counted back from today, so the newest day is always named.
        label = day.strftime("%d %b") if (days - 1 - i) % 7 == 0 and i > 2 else ""
        bars.append(Bar(i * slot + 1, height - h, h, day, tokens, label))
    return Chart(width, height, bars, max(1.0, slot - 2), peak, sum(tokens_by_day.values()))
