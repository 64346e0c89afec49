from http import HTTPStatus
from typing import Any, cast
from urllib.parse import quote

import httpx

from ...client import AuthenticatedClient, Client
from ...types import Response, UNSET
from ... import errors

from ...models.ledger_placement import LedgerPlacement
from ...models.problem import Problem
from typing import cast


def _get_kwargs(
    ledger_id: int,
) -> dict[str, Any]:

    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/api/v1/cluster/ledgers/{ledger_id}".format(
            ledger_id=quote(str(ledger_id), safe=""),
        ),
    }

    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> LedgerPlacement | Problem | None:
    if response.status_code == 200:
        response_200 = LedgerPlacement.from_dict(response.json())

        return response_200

    if response.status_code == 400:
        response_400 = Problem.from_dict(response.json())

        return response_400

    if response.status_code == 403:
        response_403 = Problem.from_dict(response.json())

        return response_403

    if response.status_code == 404:
        response_404 = Problem.from_dict(response.json())

        return response_404

    if response.status_code == 409:
        response_409 = Problem.from_dict(response.json())

        return response_409

    if response.status_code == 422:
        response_422 = Problem.from_dict(response.json())

        return response_422

    if response.status_code == 500:
        response_500 = Problem.from_dict(response.json())

        return response_500

    if response.status_code == 503:
        response_503 = Problem.from_dict(response.json())

        return response_503

    if client.raise_on_unexpected_status:
        raise errors.UnexpectedStatus(response.status_code, response.content)
    else:
        return None


def _build_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Response[LedgerPlacement | Problem]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    ledger_id: int,
    *,
    client: AuthenticatedClient | Client,
) -> Response[LedgerPlacement | Problem]:
    """Get Ledger Placement

     The ledger's quorums, writer and fragments (first entry, bookies, epoch).

    Args:
        ledger_id (int): ledger id (0 ≤ id ≤ 2^63-1)

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[LedgerPlacement | Problem]
    """

    kwargs = _get_kwargs(
        ledger_id=ledger_id,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    ledger_id: int,
    *,
    client: AuthenticatedClient | Client,
) -> LedgerPlacement | Problem | None:
    """Get Ledger Placement

     The ledger's quorums, writer and fragments (first entry, bookies, epoch).

    Args:
        ledger_id (int): ledger id (0 ≤ id ≤ 2^63-1)

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        LedgerPlacement | Problem
    """

    return sync_detailed(
        ledger_id=ledger_id,
        client=client,
    ).parsed


async def asyncio_detailed(
    ledger_id: int,
    *,
    client: AuthenticatedClient | Client,
) -> Response[LedgerPlacement | Problem]:
    """Get Ledger Placement

     The ledger's quorums, writer and fragments (first entry, bookies, epoch).

    Args:
        ledger_id (int): ledger id (0 ≤ id ≤ 2^63-1)

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[LedgerPlacement | Problem]
    """

    kwargs = _get_kwargs(
        ledger_id=ledger_id,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    ledger_id: int,
    *,
    client: AuthenticatedClient | Client,
) -> LedgerPlacement | Problem | None:
    """Get Ledger Placement

     The ledger's quorums, writer and fragments (first entry, bookies, epoch).

    Args:
        ledger_id (int): ledger id (0 ≤ id ≤ 2^63-1)

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        LedgerPlacement | Problem
    """

    return (
        await asyncio_detailed(
            ledger_id=ledger_id,
            client=client,
        )
    ).parsed
