from http import HTTPStatus
from typing import Any, cast
from urllib.parse import quote

import httpx

from ...client import AuthenticatedClient, Client
from ...types import Response, UNSET
from ... import errors

from ...models.ledger_list import LedgerList
from ...models.ledger_state_name import LedgerStateName
from ...models.offload_state_name import OffloadStateName
from ...models.problem import Problem
from ...types import UNSET, Unset
from typing import cast


def _get_kwargs(
    *,
    state: LedgerStateName | Unset = UNSET,
    after: int | Unset = UNSET,
    limit: int | Unset = 100,
    offload_state: OffloadStateName | Unset = UNSET,
    metadata: list[str] | Unset = UNSET,
) -> dict[str, Any]:

    params: dict[str, Any] = {}

    json_state: str | Unset = UNSET
    if not isinstance(state, Unset):
        json_state = state.value

    params["state"] = json_state

    params["after"] = after

    params["limit"] = limit

    json_offload_state: str | Unset = UNSET
    if not isinstance(offload_state, Unset):
        json_offload_state = offload_state.value

    params["offload_state"] = json_offload_state

    json_metadata: list[str] | Unset = UNSET
    if not isinstance(metadata, Unset):
        json_metadata = metadata

    params["metadata"] = json_metadata

    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}

    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/api/v1/ledgers",
        "params": params,
    }

    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> LedgerList | Problem | None:
    if response.status_code == 200:
        response_200 = LedgerList.from_dict(response.json())

        return response_200

    if response.status_code == 400:
        response_400 = Problem.from_dict(response.json())

        return response_400

    if response.status_code == 403:
        response_403 = Problem.from_dict(response.json())

        return response_403

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
) -> Response[LedgerList | Problem]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient | Client,
    state: LedgerStateName | Unset = UNSET,
    after: int | Unset = UNSET,
    limit: int | Unset = 100,
    offload_state: OffloadStateName | Unset = UNSET,
    metadata: list[str] | Unset = UNSET,
) -> Response[LedgerList | Problem]:
    """List Ledgers

     List ledgers in id order, a page at a time (keyset paging: `after` the last
    id seen).  With `offload_state` or `metadata`, a page looks at 20,000 ledgers
    at most, so it may hold fewer than `limit` (even none) and still have a
    `next_after`: follow it until it is null.

    Args:
        state (LedgerStateName | Unset):
        after (int | Unset): only ledgers with a larger id
        limit (int | Unset):  Default: 100.
        offload_state (OffloadStateName | Unset):
        metadata (list[str] | Unset): only ledgers whose metadata has this `key=value` pair
            (repeat for several; all must match)

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[LedgerList | Problem]
    """

    kwargs = _get_kwargs(
        state=state,
        after=after,
        limit=limit,
        offload_state=offload_state,
        metadata=metadata,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    *,
    client: AuthenticatedClient | Client,
    state: LedgerStateName | Unset = UNSET,
    after: int | Unset = UNSET,
    limit: int | Unset = 100,
    offload_state: OffloadStateName | Unset = UNSET,
    metadata: list[str] | Unset = UNSET,
) -> LedgerList | Problem | None:
    """List Ledgers

     List ledgers in id order, a page at a time (keyset paging: `after` the last
    id seen).  With `offload_state` or `metadata`, a page looks at 20,000 ledgers
    at most, so it may hold fewer than `limit` (even none) and still have a
    `next_after`: follow it until it is null.

    Args:
        state (LedgerStateName | Unset):
        after (int | Unset): only ledgers with a larger id
        limit (int | Unset):  Default: 100.
        offload_state (OffloadStateName | Unset):
        metadata (list[str] | Unset): only ledgers whose metadata has this `key=value` pair
            (repeat for several; all must match)

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        LedgerList | Problem
    """

    return sync_detailed(
        client=client,
        state=state,
        after=after,
        limit=limit,
        offload_state=offload_state,
        metadata=metadata,
    ).parsed


async def asyncio_detailed(
    *,
    client: AuthenticatedClient | Client,
    state: LedgerStateName | Unset = UNSET,
    after: int | Unset = UNSET,
    limit: int | Unset = 100,
    offload_state: OffloadStateName | Unset = UNSET,
    metadata: list[str] | Unset = UNSET,
) -> Response[LedgerList | Problem]:
    """List Ledgers

     List ledgers in id order, a page at a time (keyset paging: `after` the last
    id seen).  With `offload_state` or `metadata`, a page looks at 20,000 ledgers
    at most, so it may hold fewer than `limit` (even none) and still have a
    `next_after`: follow it until it is null.

    Args:
        state (LedgerStateName | Unset):
        after (int | Unset): only ledgers with a larger id
        limit (int | Unset):  Default: 100.
        offload_state (OffloadStateName | Unset):
        metadata (list[str] | Unset): only ledgers whose metadata has this `key=value` pair
            (repeat for several; all must match)

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[LedgerList | Problem]
    """

    kwargs = _get_kwargs(
        state=state,
        after=after,
        limit=limit,
        offload_state=offload_state,
        metadata=metadata,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    *,
    client: AuthenticatedClient | Client,
    state: LedgerStateName | Unset = UNSET,
    after: int | Unset = UNSET,
    limit: int | Unset = 100,
    offload_state: OffloadStateName | Unset = UNSET,
    metadata: list[str] | Unset = UNSET,
) -> LedgerList | Problem | None:
    """List Ledgers

     List ledgers in id order, a page at a time (keyset paging: `after` the last
    id seen).  With `offload_state` or `metadata`, a page looks at 20,000 ledgers
    at most, so it may hold fewer than `limit` (even none) and still have a
    `next_after`: follow it until it is null.

    Args:
        state (LedgerStateName | Unset):
        after (int | Unset): only ledgers with a larger id
        limit (int | Unset):  Default: 100.
        offload_state (OffloadStateName | Unset):
        metadata (list[str] | Unset): only ledgers whose metadata has this `key=value` pair
            (repeat for several; all must match)

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        LedgerList | Problem
    """

    return (
        await asyncio_detailed(
            client=client,
            state=state,
            after=after,
            limit=limit,
            offload_state=offload_state,
            metadata=metadata,
        )
    ).parsed
