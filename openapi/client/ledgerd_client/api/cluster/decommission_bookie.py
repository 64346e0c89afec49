from http import HTTPStatus
from typing import Any, cast
from urllib.parse import quote

import httpx

from ...client import AuthenticatedClient, Client
from ...types import Response, UNSET
from ... import errors

from ...models.decommissioned import Decommissioned
from ...models.problem import Problem
from typing import cast


def _get_kwargs(
    bookie_id: str,
) -> dict[str, Any]:

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/api/v1/cluster/bookies/{bookie_id}/decommission".format(
            bookie_id=quote(str(bookie_id), safe=""),
        ),
    }

    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Decommissioned | Problem | None:
    if response.status_code == 200:
        response_200 = Decommissioned.from_dict(response.json())

        return response_200

    if response.status_code == 400:
        response_400 = Problem.from_dict(response.json())

        return response_400

    if response.status_code == 401:
        response_401 = Problem.from_dict(response.json())

        return response_401

    if response.status_code == 403:
        response_403 = Problem.from_dict(response.json())

        return response_403

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
) -> Response[Decommissioned | Problem]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    bookie_id: str,
    *,
    client: AuthenticatedClient,
) -> Response[Decommissioned | Problem]:
    """Decommission Bookie

     Take a bookie whose disk is lost out of the cluster for good: its replicas
    are re-replicated at once and its id is never accepted again (409 while it is
    registered: stop it first).  A node refused at start for a wiped data
    directory (its cookie) rejoins this way, under a new BOOKIE_ID.

    Args:
        bookie_id (str): a BOOKIE_ID

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Decommissioned | Problem]
    """

    kwargs = _get_kwargs(
        bookie_id=bookie_id,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    bookie_id: str,
    *,
    client: AuthenticatedClient,
) -> Decommissioned | Problem | None:
    """Decommission Bookie

     Take a bookie whose disk is lost out of the cluster for good: its replicas
    are re-replicated at once and its id is never accepted again (409 while it is
    registered: stop it first).  A node refused at start for a wiped data
    directory (its cookie) rejoins this way, under a new BOOKIE_ID.

    Args:
        bookie_id (str): a BOOKIE_ID

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Decommissioned | Problem
    """

    return sync_detailed(
        bookie_id=bookie_id,
        client=client,
    ).parsed


async def asyncio_detailed(
    bookie_id: str,
    *,
    client: AuthenticatedClient,
) -> Response[Decommissioned | Problem]:
    """Decommission Bookie

     Take a bookie whose disk is lost out of the cluster for good: its replicas
    are re-replicated at once and its id is never accepted again (409 while it is
    registered: stop it first).  A node refused at start for a wiped data
    directory (its cookie) rejoins this way, under a new BOOKIE_ID.

    Args:
        bookie_id (str): a BOOKIE_ID

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Decommissioned | Problem]
    """

    kwargs = _get_kwargs(
        bookie_id=bookie_id,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    bookie_id: str,
    *,
    client: AuthenticatedClient,
) -> Decommissioned | Problem | None:
    """Decommission Bookie

     Take a bookie whose disk is lost out of the cluster for good: its replicas
    are re-replicated at once and its id is never accepted again (409 while it is
    registered: stop it first).  A node refused at start for a wiped data
    directory (its cookie) rejoins this way, under a new BOOKIE_ID.

    Args:
        bookie_id (str): a BOOKIE_ID

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Decommissioned | Problem
    """

    return (
        await asyncio_detailed(
            bookie_id=bookie_id,
            client=client,
        )
    ).parsed
