"""``ledgerd serve``, ``ledgerd openapi``, ``ledgerd bench``: the commands that need
the server's code, which they import only when they run (client commands stay fast).

``serve``'s flags default to None: the settings class declares the defaults,
and ``serve --help`` reads them from it (:class:`_SettingsHelp`).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperOption

from ._output import EXIT_USAGE, CliError

# serve's flags and the settings they set (DESIGN.md §9 names).
_FLAG_SETTINGS = {"host": "HOST", "port": "PORT"}


class _SettingsHelp(TyperCommand):
    """Fills the flags' help with the settings' defaults when help is shown (only then is
    the server's settings class imported)."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        from app import ServiceSettings

        for param in self.params:
            name = param.name or ""
            if name in _FLAG_SETTINGS and isinstance(param, TyperOption):
                default = ServiceSettings.model_fields[name].default
                param.help = (f"{param.help} (setting {_FLAG_SETTINGS[name]}, "
                              f"env LEDGERD_{_FLAG_SETTINGS[name]}; default {default})")
        super().format_help(ctx, formatter)


def serve_command(
    host: Annotated[str | None, typer.Option(show_default=False, help="listen address")] = None,
    port: Annotated[int | None, typer.Option(show_default=False, help="listen port")] = None,
    config: Annotated[Path | None, typer.Option(
        show_default=False, help="TOML settings file (default: LEDGERD_CONFIG, else none)")
    ] = None,
) -> None:
    """Run the service (flags win over LEDGERD_* variables, which win over the file)."""
    import uvicorn

    from app import ServiceSettings, create_app, logs, uvicorn_options
    from common.errors import InvalidSetting

    try:
        settings = ServiceSettings.load(config, host=host, port=port)
        settings.check_listen_address()
        settings.to_node()
        options = uvicorn_options(settings)  # loads the TLS files, if any
    except InvalidSetting as exc:
        raise CliError(str(exc), EXIT_USAGE) from exc
    logs.configure(settings.log_level, settings.log_format)
    app = create_app(settings)
    shown = f"[{settings.host}]" if ":" in settings.host else settings.host
    tls = "ssl_certfile" in options
    sys.stderr.write(f"ledgerd listening on {'https' if tls else 'http'}://{shown}:"
                     f"{settings.port} (data dir {settings.data_dir}, journal "
                     f"{settings.journal_device_path})\n")
    if not tls and not settings.is_loopback:
        sys.stderr.write("warning: plain HTTP on a network address: passwords and the admin "
                         "token travel in clear (set TLS_CERT_FILE and TLS_KEY_FILE)\n")
    uvicorn.run(app, **options)


def openapi_command() -> None:
    """Print the OpenAPI document (JSON, sorted keys)."""
    from app.main import openapi_document

    sys.stdout.write(openapi_document())


# `python -m bench`'s suites (bench/ is not imported by the service: named here,
# checked against bench.SUITES by tests/bench).
BENCH_SUITES = ("raw", "journal", "engine", "replay", "http", "create", "compaction",
                "cluster_idle", "reclaim", "offload", "pack", "cluster_pack", "spark",
                "spark_stream", "redis", "peers", "server", "scaling", "split", "cluster",
                "listing", "million")


def bench_command(
    duration: Annotated[float | None, typer.Option(
        show_default=False, help="seconds per data point (default 3; 0.5 with --quick)")] = None,
    only: Annotated[list[str] | None, typer.Option(
        show_default=False, help=f"run only this suite (repeatable): {', '.join(BENCH_SUITES)}",
    )] = None,
    quick: Annotated[bool, typer.Option("--quick", help="short points, small sizes")] = False,
    big: Annotated[bool, typer.Option("--big", help="GiB-sized scaling points too")] = False,
) -> None:
    """Run the benchmarks (`python -m bench`) and regenerate docs/benchmarks.md."""
    args: list[Any] = [sys.executable, "-m", "bench"]
    if duration is not None:
        args += ["--duration", str(duration)]
    for suite in only or []:
        args += ["--only", suite]
    args += ["--quick"] * quick + ["--big"] * big
    raise typer.Exit(subprocess.run(args, check=False).returncode)


def register(cli: typer.Typer) -> None:
    cli.command("serve", cls=_SettingsHelp)(serve_command)
    cli.command("openapi")(openapi_command)
    cli.command("bench")(bench_command)
