"""Options shared by the client commands (DESIGN.md §9: every one takes --url and
--password, with LEDGERD_URL and LEDGERD_PASSWORD as their environment)."""

from __future__ import annotations

from typing import Annotated

import typer

from ._http import DEFAULT_URL

UrlOpt = Annotated[str, typer.Option(
    "--url", envvar="LEDGERD_URL", help="server URL (host:port is enough)")]
PasswordOpt = Annotated[str | None, typer.Option(
    "--password", "-p", envvar="LEDGERD_PASSWORD", show_default=False,
    help="the ledger's password, any Unicode text (default: none)")]
TokenOpt = Annotated[str | None, typer.Option(
    "--token", envvar="LEDGERD_ADMIN_TOKEN", show_default=False,
    help="admin bearer token (needed when the server has ADMIN_TOKEN set)")]
LedgerIdArg = Annotated[int, typer.Argument(min=0, metavar="ID", help="ledger id")]

__all__ = ["DEFAULT_URL", "LedgerIdArg", "PasswordOpt", "TokenOpt", "UrlOpt"]
