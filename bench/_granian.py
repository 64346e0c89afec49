"""``python -m bench._granian --host H --port P``: ledgerd's app under granian, for
the server benchmark (``bench.server_bench``) only; ``ledgerd serve`` runs uvicorn.

The same ``LEDGERD_*`` settings and the same app and lifespan as ``ledgerd serve``
(:func:`app.create_app`); granian runs it through its ASGI interface (lifespan on)
in one worker process with uvloop, HTTP/1.1 only and WebSockets on, which is the
closest match to ``uvicorn.run(app, **uvicorn_options(s))``.  What granian has no
option for is left at granian's defaults: the WebSocket message size limit
(``ws_max_size``) and the keepalive ping interval and timeout.
"""

from __future__ import annotations

import argparse
import os
import sys

from fastapi import FastAPI


def app() -> FastAPI:
    """The app factory the granian worker calls (settings from ``LEDGERD_*``)."""
    from app import ServiceSettings, create_app, logs

    settings = ServiceSettings.load(None)
    logs.configure(settings.log_level, settings.log_format)
    return create_app(settings)


def main(argv: list[str] | None = None) -> None:
    from granian.constants import HTTPModes, Interfaces, Loops
    from granian.log import LogLevels
    from granian.server import Server

    from app import ServiceSettings

    parser = argparse.ArgumentParser(prog="python -m bench._granian")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    # The worker process builds the app from the environment: host and port
    # there too, so that its Host header check matches the listen address.
    os.environ["LEDGERD_HOST"], os.environ["LEDGERD_PORT"] = args.host, str(args.port)
    settings = ServiceSettings.load(None)
    settings.check_listen_address()
    settings.to_node()  # refuse bad settings here, before a worker starts
    Server("bench._granian:app", address=args.host, port=args.port, factory=True,
           interface=Interfaces.ASGI, workers=1, loop=Loops.uvloop, http=HTTPModes.http1,
           websockets=True, log_level=LogLevels.warning).serve()


if __name__ == "__main__":
    main()
