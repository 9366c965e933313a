"""`mindrouter sim`: command-line flags and the blocking runner.

The top-level `mindrouter` command adds these flags to its `sim` sub-command; `python -m
mindrouter.sim` runs the same thing on its own.
"""

from __future__ import annotations

import argparse
import socket
import sys
from collections.abc import Sequence

import uvicorn

from mindrouter.serving import bind_socket
from mindrouter.sim import build_sim_app
from mindrouter.sim.config import ENGINES, SimConfig, SimModel, parse_model_spec


def _rate(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text}")
    return value


def _non_negative(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {text}")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {text}")
    return value


def _model_spec(text: str) -> SimModel:
    try:
        return parse_model_spec(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_sim_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--engine", required=True, choices=ENGINES, help="engine to simulate")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", required=True, type=int, help="port to listen on (0: any)")
    models = parser.add_argument_group("models (default: one chat model)")
    models.add_argument(
        "--model",
        action="append",
        default=[],
        type=_model_spec,
        metavar="NAME[:CONTEXT]",
        help="chat model (repeatable)",
    )
    models.add_argument(
        "--vision-model",
        action="append",
        default=[],
        type=_model_spec,
        metavar="NAME[:CONTEXT]",
        help="chat model that accepts images",
    )
    models.add_argument(
        "--embedding-model",
        action="append",
        default=[],
        metavar="NAME",
        help="embedding model (repeatable)",
    )
    models.add_argument(
        "--rerank-model",
        action="append",
        default=[],
        type=_model_spec,
        metavar="NAME[:CONTEXT]",
        help="rerank (cross-encoder) model for /rerank and /score; vllm and llamacpp only",
    )
    timing = parser.add_argument_group("capacity and speed")
    timing.add_argument(
        "--slots",
        type=_positive_int,
        default=4,
        help="requests generated at once; the rest wait in order",
    )
    timing.add_argument(
        "--tokens-per-second",
        type=_non_negative,
        default=0.0,
        help="decode speed per request (0: as fast as possible)",
    )
    timing.add_argument(
        "--ttft-ms",
        type=_non_negative,
        default=0.0,
        help="delay before the first token, after getting a slot",
    )
    timing.add_argument(
        "--default-tokens",
        type=_count,
        default=24,
        help="answer length when max_tokens does not cut it shorter",
    )
    faults = parser.add_argument_group("faults")
    faults.add_argument("--fail-rate", type=_rate, default=0.0, help="share of requests failed")
    faults.add_argument("--fail-status", type=int, default=500, help="status of failed requests")
    faults.add_argument(
        "--hang-rate", type=_rate, default=0.0, help="share of requests accepted and never answered"
    )
    faults.add_argument(
        "--drop-after",
        type=_count,
        default=None,
        metavar="N",
        help="close streams abruptly after N chunks",
    )
    faults.add_argument(
        "--stall-after",
        type=_count,
        default=None,
        metavar="N",
        help="stop streams after N chunks and keep the connection open, silent",
    )
    faults.add_argument("--seed", type=int, default=0, help="seed of the fault dice")
    parser.add_argument(
        "--reasoning-field",
        choices=("reasoning", "reasoning_content"),
        default="reasoning",
        help="vLLM only: name of the reasoning field",
    )


def sim_config_from_args(ns: argparse.Namespace) -> SimConfig:
    models: list[SimModel] = list(ns.model)
    models += [SimModel(m.name, m.context_length, "vision") for m in ns.vision_model]
    models += [SimModel(name, kind="embedding") for name in ns.embedding_model]
    models += [SimModel(m.name, m.context_length, "rerank") for m in ns.rerank_model]
    return SimConfig(
        engine=ns.engine,
        models=models,
        slots=ns.slots,
        tokens_per_second=ns.tokens_per_second,
        ttft_ms=ns.ttft_ms,
        default_tokens=ns.default_tokens,
        fail_rate=ns.fail_rate,
        fail_status=ns.fail_status,
        hang_rate=ns.hang_rate,
        drop_after=ns.drop_after,
        stall_after=ns.stall_after,
        seed=ns.seed,
        reasoning_field=ns.reasoning_field,
    )


def run_sim(ns: argparse.Namespace) -> int:
    """Serve until interrupted; 0 after a clean shutdown, 1 if the server could not start."""
    try:
        config = sim_config_from_args(ns)
    except ValueError as exc:
        print(f"mindrouter sim: {exc}", file=sys.stderr)
        return 2
    try:
        sock = bind_socket(ns.host, ns.port)
    except OSError as exc:
        print(f"mindrouter sim: cannot listen on {ns.host}:{ns.port}: {exc}", file=sys.stderr)
        return 1
    # Responses are small writes: without TCP_NODELAY (inherited by accepted sockets) each
    # keep-alive response can stall ~40 ms on the client's delayed ACK.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    port = sock.getsockname()[1]
    app = build_sim_app(config)
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=2)
    )
    names = ", ".join(model.name for model in config.models)
    print(
        f"mindrouter sim: {config.engine} on http://{ns.host}:{port} serving {names}",
        file=sys.stderr,
        flush=True,
    )
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        # uvicorn shuts down cleanly on SIGINT, then re-raises it for the caller to see.
        pass
    finally:
        sock.close()
    return 0 if server.started else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mindrouter sim", description=__doc__)
    add_sim_arguments(parser)
    return run_sim(parser.parse_args(argv))
