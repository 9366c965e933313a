"""The `mindrouter` command line: serve, demo, sim, and the administration verbs."""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import socket
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from mindrouter.settings import ConfigError, Settings


def _serve(ns: argparse.Namespace) -> int:
    from mindrouter.observability.logging import configure_logging, log
    from mindrouter.settings import load_settings
    from mindrouter.settings_sources import secret_key_problem
    from mindrouter.workers import WorkersRefused, check_shared_state, worker_count

    settings = load_settings(ns.config)
    configure_logging(settings.log_level)
    try:
        workers = worker_count(ns.workers)
        check_shared_state(workers, settings.redis_url)
    except (ValueError, WorkersRefused) as exc:
        print(f"mindrouter serve: {exc}", file=sys.stderr)
        return 2
    problem = secret_key_problem(settings.secret_key)
    if problem is not None:
        log.warning(
            f"{problem}: set a long random one with MINDROUTER_SECRET_KEY or secret_key_file",
            config=ns.config,
        )
    if workers > 1 and ns.listen_fd is None:
        from mindrouter.workers import Supervisor

        host = ns.host or settings.host
        port = ns.port if ns.port is not None else settings.port
        return Supervisor(ns.config, host, port, workers).run()
    with contextlib.suppress(KeyboardInterrupt):
        return _event_loop_runner()(_serve_async(settings, ns))
    return 0


def _event_loop_runner() -> Callable[[Coroutine[Any, Any, int]], int]:
    """uvloop where it is installed (it comes with uvicorn[standard]): its transports and
    scheduling are C. Measured on the governed profile at 100 RPS (`bench.overhead.profile
    --compare default,asyncio-loop`): about 2% less CPU per request and a shorter tail."""
    try:
        import uvloop
    except ImportError:
        import asyncio

        return asyncio.run
    return uvloop.run


async def _serve_async(settings: Settings, ns: argparse.Namespace) -> int:
    from mindrouter.app import build_app
    from mindrouter.serving import InLoopServer
    from mindrouter.stores.sql import (
        DatabaseNotMigrated,
        DatabaseUnavailable,
        open_stores,
    )
    from mindrouter.tokens import preload as preload_tokenizer

    stores = open_stores(settings.database_url, audit_commit=settings.audit_commit)
    try:
        await stores.ensure_migrated(ns.config)
    except (DatabaseNotMigrated, DatabaseUnavailable) as exc:
        await stores.aclose()
        print(f"mindrouter serve: {exc}", file=sys.stderr)
        return 1
    host = ns.host or settings.host
    port = ns.port if ns.port is not None else settings.port
    # A worker of `serve --workers` serves the supervisor's socket (see workers.py).
    inherited = None if ns.listen_fd is None else socket.socket(fileno=ns.listen_fd)
    if inherited is not None:
        host = inherited.getsockname()[0]
    app = build_app(settings, stores)
    preload_tokenizer()
    # Everything built so far lives as long as the process: out of the collector's sight, a full
    # collection no longer walks the ~180k objects of the imported modules and the app (a pause
    # of 100-300 ms of the event loop, every stream's chunks held up behind it, and about 5% of
    # the CPU of a busy gateway; bench/results/overhead-chunks.md).
    gc.collect()
    gc.freeze()
    # The server waits a little past the grace period: streams end with their in-band error
    # when it is over, and that last event must still reach the clients.
    server = InLoopServer(
        app,
        host=host,
        port=port,
        graceful=settings.shutdown_grace_s + 5.0,
        on_signal=app.state.drain.begin,
        sock=inherited,
    )
    _reload_on_sighup(app.state.config_reload, ns.config)
    if inherited is None:
        print(f"MindRouter listening on {server.url}", flush=True)
    else:
        print(f"MindRouter worker {ns.worker_index} (pid {os.getpid()}) serving", flush=True)
    if settings.metrics_port is not None:
        # Each worker has its own counters, so its own listener: worker i on metrics_port + i.
        metrics_port = settings.metrics_port
        if metrics_port and ns.worker_index:
            metrics_port += ns.worker_index
        metrics = InLoopServer(app.state.metrics_app, host=host, port=metrics_port)
        await metrics.start()
        whose = "" if inherited is None else f" of worker {ns.worker_index}"
        print(f"Metrics{whose} on {metrics.url}/metrics", flush=True)
    await server.serve_forever()
    return 0


def _config_check(ns: argparse.Namespace) -> int:
    """Loads the file as `serve` would; a ConfigError reaches `main`, which prints each
    problem."""
    from mindrouter.settings import load_settings

    s = load_settings(ns.config)
    print(
        f"{ns.config}: valid ({len(s.groups)} groups, {len(s.users)} users, "
        f"{len(s.backends)} backends, {len(s.models)} models)"
    )
    return 0


def _reload_on_sighup(reload: Any, path: str) -> None:
    """SIGHUP re-reads the file (see config_reload.py); one reload at a time."""
    import asyncio
    import signal

    pending: set[asyncio.Task[bool]] = set()

    def on_hup() -> None:
        task = asyncio.ensure_future(reload.reload(path))
        pending.add(task)
        task.add_done_callback(pending.discard)

    asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, on_hup)


def _demo(ns: argparse.Namespace) -> int:
    from mindrouter.demo import main

    return main(ns.host, ns.port)


def _sim(ns: argparse.Namespace) -> int:
    from mindrouter.sim.cli import run_sim

    return run_sim(ns)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mindrouter", description="An inference gateway for shared GPU clusters."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the gateway from a config file")
    serve.add_argument("--config", required=True, help="YAML configuration file")
    serve.add_argument("--host", help="listen address (default: the config's, else 127.0.0.1)")
    serve.add_argument("--port", type=int, help="listen port (default: the config's, else 8000)")
    serve.add_argument(
        "--workers",
        default="1",
        help="gateway processes on the one port: a number, or 'auto' for one per core "
        "(default 1; more than one needs redis_url)",
    )
    # Set by the supervisor of `--workers` for the processes it starts.
    serve.add_argument("--listen-fd", type=int, help=argparse.SUPPRESS)
    serve.add_argument("--worker-index", type=int, default=0, help=argparse.SUPPRESS)
    serve.set_defaults(run=_serve)

    config = sub.add_parser("config", help="check a configuration file")
    config_sub = config.add_subparsers(dest="config_command", required=True)
    check = config_sub.add_parser(
        "check", help="list every problem of the file; exit 2 when there is one"
    )
    check.add_argument("--config", required=True, help="YAML configuration file")
    check.set_defaults(run=_config_check)

    demo = sub.add_parser("demo", help="run the gateway with simulated backends, no setup")
    demo.add_argument("--host", default="127.0.0.1")
    demo.add_argument("--port", type=int, default=8000)
    demo.set_defaults(run=_demo)

    from mindrouter.sim.cli import add_sim_arguments

    sim = sub.add_parser("sim", help="run a simulated vLLM, Ollama or llama.cpp server")
    add_sim_arguments(sim)
    sim.set_defaults(run=_sim)

    from mindrouter.admin_cli import add_admin_commands

    add_admin_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    try:
        code: int = ns.run(ns)
    except ConfigError as exc:
        print(exc.report("mindrouter: configuration error: "), file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
