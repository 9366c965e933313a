"""The Markdown report of an overhead run: figures, ratios to LiteLLM, targets, points."""

from __future__ import annotations

from typing import Any

from bench.overhead import goals

BARE = "mindrouter-bare"
GOVERNED = "mindrouter-governed"
FAST = "mindrouter-governed-fast"
FLOOR = "floor"
LITELLM = "litellm"
# Figures whose ratio means something; added latencies are differences of small numbers.
RATIO_PATHS = frozenset(
    {
        "max_sustained_rps",
        "cpu_us_per_request",
        "cpu_us_per_request_at_lowest_rate",
        "memory.idle_mib",
        "memory.peak_mib",
    }
)
NAMES = {
    BARE: "MindRouter bare",
    GOVERNED: "MindRouter governed",
    FAST: "MindRouter governed, audit fast",
    FLOOR: "floor relay",
    LITELLM: "LiteLLM bare",
}


def _num(value: Any, digits: int = 2) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _cell(fig: dict[str, Any], path: str, digits: int) -> str:
    value = _get(fig, path)
    if path == "max_sustained_rps" and value is None and fig.get("first_failing_rps"):
        return f"< {fig['first_failing_rps']}"
    if path == "max_sustained_rps" and fig.get("sweep_stopped_at_fixed_rate"):
        return f"≥ {value}"
    return _num(value, digits)


def _ratio(mine: Any, peer: Any, higher_is_better: bool) -> str:
    """How many times better than the peer (>1 is better), whatever the direction of the figure."""
    if not isinstance(mine, int | float) or not isinstance(peer, int | float):
        return "–"
    if mine <= 0 or peer <= 0:
        return "–"
    r = mine / peer if higher_is_better else peer / mine
    return f"{r:.2f}×"


def _get(fig: dict[str, Any], path: str) -> Any:
    node: Any = fig
    for part in path.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def markdown(data: dict[str, Any]) -> str:
    meta = data["meta"]
    figs = data["figures"]
    rate = meta["plan"].get("fixed_rate", 200)
    concs = meta["plan"]["stream_concurrency"]
    conc = 32 if 32 in concs else concs[0]
    cols = [n for n in (BARE, GOVERNED, FAST, LITELLM, FLOOR) if n in figs]
    peer = figs.get(LITELLM, {})
    lines = [
        f"# Gateway overhead ({meta['mode']} run)",
        "",
        f"Started {meta['started']}, {meta['duration_s']:.0f} s, `{meta['command']}`, "
        f"commit {meta.get('mindrouter_commit') or '?'}, {meta['litellm']}. "
        f"{meta['cores']} cores; {meta['pinning']}. Load average (1 min) at start "
        f"{meta['loadavg_start'][0]:.2f}, highest {meta['loadavg_1m_max']:.2f}, at end "
        f"{meta['loadavg_end'][0]:.2f}: the machine is shared, so compare ratios within this run.",
        "",
    ]
    if meta.get("mock"):
        lines += [f"The mock: {meta['mock']}.", ""]
    for name, why in meta.get("skipped", {}).items():
        lines.append(f"**{name} skipped:** {why}")
        lines.append("")
    rows: list[tuple[str, str, bool, int]] = [
        (f"added latency p50 at {rate} RPS (ms)", f"added_p50_ms_at_{rate}", False, 2),
        (f"added latency p99 at {rate} RPS (ms)", f"added_p99_ms_at_{rate}", False, 2),
        ("max sustained RPS, one core", "max_sustained_rps", True, 0),
        (f"share of offered rate achieved at {rate} RPS", f"achieved_ratio_at_{rate}", True, 3),
        (f"CPU per successful request at {rate} RPS (µs)", "cpu_us_per_request", False, 0),
        (
            "CPU per successful request at the lowest rate (µs)",
            "cpu_us_per_request_at_lowest_rate",
            False,
            0,
        ),
        (f"added TTFT p50, {conc} streams (ms)", f"stream_c{conc}.added_ttft_p50_ms", False, 2),
        (f"added TTFT p99, {conc} streams (ms)", f"stream_c{conc}.added_ttft_p99_ms", False, 2),
        (f"coalesced streams of {conc}-stream run", f"stream_c{conc}.coalesced_streams", False, 0),
        ("memory idle (MiB)", "memory.idle_mib", False, 1),
        ("memory peak (MiB)", "memory.peak_mib", False, 1),
        ("memory slope in soak (MiB/min)", "memory.soak_slope_mib_per_min", False, 2),
        (f"error rate at {rate} RPS", f"error_rate_at_{rate}", False, 4),
        ("error rate up to max sustained", "error_rate_up_to_sustained", False, 4),
    ]
    header = "| figure | " + " | ".join(NAMES[c] for c in cols)
    mine = [m for m in (BARE, GOVERNED, FAST) if m in figs]
    sep = "|---|" + "---:|" * len(cols)
    if LITELLM in figs:
        header += "".join(f" | {NAMES[m].removeprefix('MindRouter ')} vs LiteLLM" for m in mine)
        sep += "---:|" * len(mine)
    lines += [header + " |", sep]
    for label, path, higher, digits in rows:
        cells = [_cell(figs[c], path, digits) for c in cols]
        if LITELLM in figs:
            for mine_ in mine:
                value = _get(figs.get(mine_, {}), path)
                comparable = path in RATIO_PATHS
                cells.append(_ratio(value, _get(peer, path), higher) if comparable else "–")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += [
        "",
        'Ratios are "times better than LiteLLM" (above 1 is better) for rates, CPU and memory; '
        "added latencies are differences of small numbers and are compared in the text, not as "
        "ratios. Added latency is the gateway's latency minus the direct-to-mock latency at the "
        "same offered rate in the same round, each measured from the request's intended send "
        "time.",
        "",
    ]
    lines += _targets(figs, rate, conc, meta)
    lines += _sweep(data)
    lines += _streams(data)
    lines += _others(data)
    lines += _checks(data)
    return "\n".join(lines) + "\n"


def _targets(figs: dict[str, Any], rate: int, conc: int, meta: dict[str, Any]) -> list[str]:
    if GOVERNED not in figs:
        return []

    def check(ok: bool | None) -> str:
        if ok is None:
            return "–"
        return "met" if ok else "**not met**"

    out = [
        "## Targets (governed profile: PostgreSQL + Redis, one core)",
        "",
        "| target | measured | |",
        "|---|---:|---|",
    ]
    out += [f"| {a} | {b} | {check(c)} |" for a, b, c in goals.rows(figs, rate)]
    if meta["mode"] == "short":
        out += [
            "",
            "Short mode: few samples and one round; the verdicts are indicative only, the full "
            "run is the one to judge by.",
        ]
    out.append("")
    return out


def _sweep(data: dict[str, Any]) -> list[str]:
    pts = [p for p in data["points"] if p["scenario"] == "sweep"]
    if not pts:
        return []
    out = [
        "## Open-loop sweep (non-streaming, ~1 KB reply)",
        "",
        "Each cell: p50 / p99 latency in ms from the intended send time, achieved share of the "
        "offered rate, errors; CPU µs per request. One line per round.",
        "",
        "| RPS | round | target | p50 | p99 | achieved | errors | CPU µs/req |",
        "|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for p in sorted(pts, key=lambda p: (p["rate"], p["round"])):
        out.append(
            f"| {p['rate']} | {p['round']} | {p['target']} | {_num(p['p50_ms'])} | "
            f"{_num(p['p99_ms'])} | {_num(p.get('achieved_ratio'), 3)} | {p['errors']} | "
            f"{_num(p['cpu_us_per_request'], 0)} |"
        )
    out.append("")
    return out


def _streams(data: dict[str, Any]) -> list[str]:
    pts = [p for p in data["points"] if p["scenario"] == "stream"]
    if not pts:
        return []
    out = [
        "## Streams (64 chunks 10 ms apart after a 20 ms first-token delay; closed loop)",
        "",
        "| streams | target | ok | TTFT p50 | TTFT p99 | chunks min | coalesced | gap p50 | "
        "gap p99 | gap max | same-read share | CPU µs/chunk |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for p in sorted(pts, key=lambda p: p["concurrency"]):
        out.append(
            f"| {p['concurrency']} | {p['target']} | {p['ok']}/{p['streams']} | "
            f"{_num(p['ttft_p50_ms'])} | {_num(p['ttft_p99_ms'])} | {p['chunks_received_min']} | "
            f"{p['coalesced_streams']} | {_num(p['gap_p50_ms'])} | {_num(p['gap_p99_ms'])} | "
            f"{_num(p['gap_max_ms'])} | {_num(p['same_read_fraction'], 3)} | "
            f"{_num(p['cpu_us_per_chunk'], 0)} |"
        )
    out += [
        "",
        '"coalesced" counts streams that delivered fewer content events than the mock sent '
        '(the gateway merged deltas); "same-read share" is the share of events that reached the '
        "client in one socket read with the previous one, which a busy client core also causes.",
        "",
    ]
    return out


def _others(data: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for scenario, title in (
        ("large-prompt", "Large prompt (~100 KB, 10 tools), 20 RPS"),
        ("anthropic", "Anthropic-format requests to the OpenAI-format mock, 100 RPS"),
        ("soak", "Soak at half the sustained rate"),
    ):
        pts = [p for p in data["points"] if p["scenario"] == scenario]
        if not pts:
            continue
        out += [
            f"## {title}",
            "",
            "| target | RPS | p50 ms | p99 ms | errors | CPU µs/req | RSS slope MiB/min |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for p in pts:
            out.append(
                f"| {p['target']} | {p['rate']} | {_num(p['p50_ms'])} | {_num(p['p99_ms'])} | "
                f"{p['errors']} ({_num(p['error_rate'], 4)}) | "
                f"{_num(p['cpu_us_per_request'], 0)} | "
                f"{_num(p.get('rss_slope_mib_per_min'))} |"
            )
        out.append("")
    pts = [p for p in data["points"] if p["scenario"] == "disconnect"]
    if pts:
        out += [
            "## Disconnect (streams cancelled by the client after 5 chunks)",
            "",
            "| target | cancelled | backend saw close | close delay p50 ms | p99 ms | max ms | "
            "tokens charged per stream | in flight after |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for p in pts:
            out.append(
                f"| {p['target']} | {p['cancelled']} | {p['backend_saw_close']} | "
                f"{_num(p['close_delay_p50_ms'])} | {_num(p['close_delay_p99_ms'])} | "
                f"{_num(p['close_delay_max_ms'])} | "
                f"{_num(p.get('tokens_charged_per_cancelled_stream'), 1)} | "
                f"{_num(p.get('in_flight_after'))} |"
            )
        out.append("")
    return out


def _checks(data: dict[str, Any]) -> list[str]:
    """The mock's parity, the commit probe and the workers rows, point by point."""
    pts = data["points"]
    out: list[str] = []
    parity = [p for p in pts if p["scenario"] == "mock-parity"]
    if parity:
        out += [
            "## The mock: a unary answer against the same reply as a `[whole]` stream (direct)",
            "",
            "| kind | round | RPS | p50 ms | p99 ms | bytes |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        out += [
            f"| {p['kind']} | {p['round']} | {p['rate']} | {_num(p['p50_ms'], 3)} | "
            f"{_num(p['p99_ms'], 3)} | {_num(p['bytes_p50'], 0)} |"
            for p in parity
        ]
        out.append("")
    probes = [p for p in pts if p["scenario"] == "commit-probe"]
    if probes:
        out += [
            "## PostgreSQL: single-row INSERT + COMMIT from the load client",
            "",
            "| when | commits | synchronous_commit | fsync | p50 ms | p99 ms | load |",
            "|---|---:|---|---|---:|---:|---:|",
        ]
        out += [
            f"| {p['when']} | {p['commits']} | {p['synchronous_commit']} | {p.get('fsync', '?')} | "
            f"{_num(p['p50_ms'], 3)} | {_num(p['p99_ms'], 3)} | {_num(p['loadavg_1m'])} |"
            for p in probes
        ]
        out.append("")
    workers = [p for p in pts if p["scenario"] in ("workers", "workers-half-rate")]
    if workers:
        out += [
            "## Workers: one process against two (a new connection for every request)",
            "",
            "The two-worker servers may run on both cores (`taskset -c 0,1`) and so share core 0 "
            "with the load client and the mock: their latency is not comparable with the "
            "one-core rows; CPU per request and the balance are. A worker's share is its "
            "process tree's CPU time over the step (utime + stime from /proc) over the two "
            "workers' sum, the supervisor left out: CPU, not a count of requests.",
            "",
            "The one process is also measured at half the rate, what each of two workers "
            "serves: CPU per request falls as a process's rate rises.",
            "",
            "| target | round | RPS | p50 ms | p99 ms | errors | CPU µs/req | worker shares |",
            "|---|---:|---:|---:|---:|---:|---:|---|",
        ]
        out += [
            f"| {p['target']} | {p['round']} | {p['rate']} | {_num(p['p50_ms'])} | "
            f"{_num(p['p99_ms'])} | {p['errors']} | {_num(p['cpu_us_per_request'], 0)} | "
            f"{', '.join(f'{x:.3f}' for x in p.get('worker_shares', [])) or '–'} |"
            for p in workers
        ]
        out.append("")
    return out
