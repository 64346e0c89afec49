from http import HTTPStatus
from typing import Any, cast
from urllib.parse import quote

import httpx

from ...client import AuthenticatedClient, Client
from ...types import Response, UNSET
from ... import errors

from ...models.entry_page import EntryPage
from ...models.problem import Problem
from ...types import UNSET, Unset
from typing import cast


def _get_kwargs(
    ledger_id: int,
    *,
    start: int | Unset = 0,
    end: int | Unset = UNSET,
    limit: int | Unset = UNSET,
) -> dict[str, Any]:

    params: dict[str, Any] = {}

    params["start"] = start

    params["end"] = end

    params["limit"] = limit

    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}

    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/api/v1/ledgers/{ledger_id}/entries".format(
            ledger_id=quote(str(ledger_id), safe=""),
        ),
        "params": params,
    }

    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> EntryPage | Problem | None:
    if response.status_code == 200:
        response_200 = EntryPage.from_dict(response.json())

        return response_200

    if response.status_code == 400:
        response_400 = Problem.from_dict(response.json())

        return response_400

    if response.status_code == 404:
        response_404 = Problem.from_dict(response.json())

        return response_404

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
) -> Response[EntryPage | Problem]:
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
    start: int | Unset = 0,
    end: int | Unset = UNSET,
    limit: int | Unset = UNSET,
) -> Response[EntryPage | Problem]:
    """Read Entries

     Entries ``start..end`` in order, as a JSON page or a stream of frames.

    Args:
        ledger_id (int): ledger id (0 ≤ id ≤ 2^63-1)
        start (int | Unset): first entry id Default: 0.
        end (int | Unset): last entry id, inclusive (default and at most: last-add-confirmed);
            below `start` is 400
        limit (int | Unset): most entries; a JSON page holds at most 1000 (default 100), a frame
            stream is unbounded

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[EntryPage | Problem]
    """

    kwargs = _get_kwargs(
        ledger_id=ledger_id,
        start=start,
        end=end,
        limit=limit,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    ledger_id: int,
    *,
    client: AuthenticatedClient | Client,
    start: int | Unset = 0,
    end: int | Unset = UNSET,
    limit: int | Unset = UNSET,
) -> EntryPage | Problem | None:
    """Read Entries

     Entries ``start..end`` in order, as a JSON page or a stream of frames.

    Args:
        ledger_id (int): ledger id (0 ≤ id ≤ 2^63-1)
        start (int | Unset): first entry id Default: 0.
        end (int | Unset): last entry id, inclusive (default and at most: last-add-confirmed);
            below `start` is 400
        limit (int | Unset): most entries; a JSON page holds at most 1000 (default 100), a frame
            stream is unbounded

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        EntryPage | Problem
    """

    return sync_detailed(
        ledger_id=ledger_id,
        client=client,
        start=start,
        end=end,
        limit=limit,
    ).parsed


async def asyncio_detailed(
    ledger_id: int,
    *,
    client: AuthenticatedClient | Client,
    start: int | Unset = 0,
    end: int | Unset = UNSET,
    limit: int | Unset = UNSET,
) -> Response[EntryPage | Problem]:
    """Read Entries

     Entries ``start..end`` in order, as a JSON page or a stream of frames.

    Args:
        ledger_id (int): ledger id (0 ≤ id ≤ 2^63-1)
        start (int | Unset): first entry id Default: 0.
        end (int | Unset): last entry id, inclusive (default and at most: last-add-confirmed);
            below `start` is 400
        limit (int | Unset): most entries; a JSON page holds at most 1000 (default 100), a frame
            stream is unbounded

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[EntryPage | Problem]
    """

    kwargs = _get_kwargs(
        ledger_id=ledger_id,
        start=start,
        end=end,
        limit=limit,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    ledger_id: int,
    *,
    client: AuthenticatedClient | Client,
    start: int | Unset = 0,
    end: int | Unset = UNSET,
    limit: int | Unset = UNSET,
) -> EntryPage | Problem | None:
    """Read Entries

     Entries ``start..end`` in order, as a JSON page or a stream of frames.

    Args:
        ledger_id (int): ledger id (0 ≤ id ≤ 2^63-1)
        start (int | Unset): first entry id Default: 0.
        end (int | Unset): last entry id, inclusive (default and at most: last-add-confirmed);
            below `start` is 400
        limit (int | Unset): most entries; a JSON page holds at most 1000 (default 100), a frame
            stream is unbounded

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        EntryPage | Problem
    """

    return (
        await asyncio_detailed(
            ledger_id=ledger_id,
            client=client,
            start=start,
            end=end,
            limit=limit,
        )
    ).parsed
