"""``ledgerd cluster``: what an operator of a cluster asks of it (docs/cluster.md §13)."""

from __future__ import annotations

from typing import Annotated

import typer
from ledgerd_client.api.cluster import decommission_bookie, get_cluster

from ._http import Api
from ._options import DEFAULT_URL, TokenOpt, UrlOpt
from ._output import print_json

cluster_cli = typer.Typer(help="Operate a cluster: members, repairs, lost bookies.",
                          no_args_is_help=True)

BookieIdArg = Annotated[str, typer.Argument(metavar="BOOKIE_ID", help="the bookie's id")]


@cluster_cli.command("status")
def status_command(url: UrlOpt = DEFAULT_URL) -> None:
    """The cluster's members, under-replicated ledgers and decommissioned bookies (JSON)."""
    with Api(url) as api:
        view = api.call(lambda c: get_cluster.sync_detailed(client=c))
    print_json(view.to_dict())


@cluster_cli.command("decommission")
def decommission_command(bookie_id: BookieIdArg, url: UrlOpt = DEFAULT_URL,
                         token: TokenOpt = None) -> None:
    """Take a bookie whose disk is lost out for good: its replicas are re-replicated
    at once and its id is refused from then on.  The bookie must be stopped."""
    with Api(url, token=token) as api:
        done = api.call(lambda c: decommission_bookie.sync_detailed(bookie_id, client=c))
    print_json(done.to_dict())
