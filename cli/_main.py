"""The ``ledgerd`` command: the typer app and the one place errors become exit codes."""

from __future__ import annotations

import os
import sys

import typer

from . import _admin, _server, _spark
from ._append import append_command  # registers `ledger append`
from ._cluster import cluster_cli
from ._ledger import ledger_cli
from ._output import (
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    CliError,
    print_error,
)

cli = typer.Typer(
    help="ledgerd: a BookKeeper-style ledger store with a REST API.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
cli.add_typer(ledger_cli, name="ledger")
cli.add_typer(cluster_cli, name="cluster")
_server.register(cli)
cli.command("gc")(_admin.gc_command)
cli.command("offload")(_admin.offload_command)
_spark.register(cli)

__all__ = ["append_command", "cli", "main"]


def main(argv: list[str] | None = None) -> None:
    """Run ``ledgerd``; exits with the documented exit code, never with a traceback
    (``LEDGERD_DEBUG=1`` shows one for an internal error)."""
    command = typer.main.get_command(cli)
    try:
        code = command.main(args=argv, prog_name="ledgerd", standalone_mode=False)
    except CliError as exc:
        print_error(exc.message)
        code = exc.exit_code
    except typer.TyperException as exc:
        # Usage errors: plain text, not rich's 80-column boxes.
        show = getattr(exc, "show", None)
        if show is not None:
            show()
        else:
            print_error(exc.format_message())
        code = exc.exit_code if exc.exit_code else EXIT_USAGE
    except (typer.Abort, KeyboardInterrupt):
        code = EXIT_INTERRUPTED
    except Exception as exc:
        if os.environ.get("LEDGERD_DEBUG"):
            raise
        print_error(f"internal error, please report it: {type(exc).__name__}: {exc} "
                    "(LEDGERD_DEBUG=1 shows the traceback)")
        code = EXIT_INTERNAL
    sys.exit(code if isinstance(code, int) else 0)
