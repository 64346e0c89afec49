from http import HTTPStatus
from typing import Any, cast
from urllib.parse import quote

import httpx

from ...client import AuthenticatedClient, Client
from ...types import Response, UNSET
from ... import errors

from ...models.ledger import Ledger
from ...models.problem import Problem
from ...types import UNSET, Unset
from typing import cast


def _get_kwargs(
    ledger_id: int,
    *,
    x_ledger_password: str | Unset = UNSET,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}
    if not isinstance(x_ledger_password, Unset):
        headers["X-Ledger-Password"] = x_ledger_password

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/api/v1/ledgers/{ledger_id}/close".format(
            ledger_id=quote(str(ledger_id), safe=""),
        ),
    }

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Ledger | Problem | None:
    if response.status_code == 200:
        response_200 = Ledger.from_dict(response.json())

        return response_200

    if response.status_code == 403:
        response_403 = Problem.from_dict(response.json())

        return response_403

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
) -> Response[Ledger | Problem]:
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
    x_ledger_password: str | Unset = UNSET,
) -> Response[Ledger | Problem]:
    """Close Ledger

     Seal the ledger: its last entry id and length are fixed from now on.

    Args:
        ledger_id (int): ledger id (0 ≤ id ≤ 2^63-1)
        x_ledger_password (str | Unset): The ledger's password (missing = empty password). Plain
            ASCII is sent as is. Any other password (non-ASCII, control characters, leading or
            trailing spaces, or text that itself begins with `UTF-8''`) is sent as an RFC 8187 ext-
            value: `UTF-8''` followed by its UTF-8 bytes percent-encoded, e.g. `pässwörd` →
            `UTF-8''p%C3%A4ssw%C3%B6rd` (JavaScript: `"UTF-8''" + encodeURIComponent(pw)`; Python:
            `"UTF-8''" + urllib.parse.quote(pw, safe="")`). Raw UTF-8 header bytes are also
            understood, for clients that can send them.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Ledger | Problem]
    """

    kwargs = _get_kwargs(
        ledger_id=ledger_id,
        x_ledger_password=x_ledger_password,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    ledger_id: int,
    *,
    client: AuthenticatedClient | Client,
    x_ledger_password: str | Unset = UNSET,
) -> Ledger | Problem | None:
    """Close Ledger

     Seal the ledger: its last entry id and length are fixed from now on.

    Args:
        ledger_id (int): ledger id (0 ≤ id ≤ 2^63-1)
        x_ledger_password (str | Unset): The ledger's password (missing = empty password). Plain
            ASCII is sent as is. Any other password (non-ASCII, control characters, leading or
            trailing spaces, or text that itself begins with `UTF-8''`) is sent as an RFC 8187 ext-
            value: `UTF-8''` followed by its UTF-8 bytes percent-encoded, e.g. `pässwörd` →
            `UTF-8''p%C3%A4ssw%C3%B6rd` (JavaScript: `"UTF-8''" + encodeURIComponent(pw)`; Python:
            `"UTF-8''" + urllib.parse.quote(pw, safe="")`). Raw UTF-8 header bytes are also
            understood, for clients that can send them.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Ledger | Problem
    """

    return sync_detailed(
        ledger_id=ledger_id,
        client=client,
        x_ledger_password=x_ledger_password,
    ).parsed


async def asyncio_detailed(
    ledger_id: int,
    *,
    client: AuthenticatedClient | Client,
    x_ledger_password: str | Unset = UNSET,
) -> Response[Ledger | Problem]:
    """Close Ledger

     Seal the ledger: its last entry id and length are fixed from now on.

    Args:
        ledger_id (int): ledger id (0 ≤ id ≤ 2^63-1)
        x_ledger_password (str | Unset): The ledger's password (missing = empty password). Plain
            ASCII is sent as is. Any other password (non-ASCII, control characters, leading or
            trailing spaces, or text that itself begins with `UTF-8''`) is sent as an RFC 8187 ext-
            value: `UTF-8''` followed by its UTF-8 bytes percent-encoded, e.g. `pässwörd` →
            `UTF-8''p%C3%A4ssw%C3%B6rd` (JavaScript: `"UTF-8''" + encodeURIComponent(pw)`; Python:
            `"UTF-8''" + urllib.parse.quote(pw, safe="")`). Raw UTF-8 header bytes are also
            understood, for clients that can send them.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Ledger | Problem]
    """

    kwargs = _get_kwargs(
        ledger_id=ledger_id,
        x_ledger_password=x_ledger_password,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    ledger_id: int,
    *,
    client: AuthenticatedClient | Client,
    x_ledger_password: str | Unset = UNSET,
) -> Ledger | Problem | None:
    """Close Ledger

     Seal the ledger: its last entry id and length are fixed from now on.

    Args:
        ledger_id (int): ledger id (0 ≤ id ≤ 2^63-1)
        x_ledger_password (str | Unset): The ledger's password (missing = empty password). Plain
            ASCII is sent as is. Any other password (non-ASCII, control characters, leading or
            trailing spaces, or text that itself begins with `UTF-8''`) is sent as an RFC 8187 ext-
            value: `UTF-8''` followed by its UTF-8 bytes percent-encoded, e.g. `pässwörd` →
            `UTF-8''p%C3%A4ssw%C3%B6rd` (JavaScript: `"UTF-8''" + encodeURIComponent(pw)`; Python:
            `"UTF-8''" + urllib.parse.quote(pw, safe="")`). Raw UTF-8 header bytes are also
            understood, for clients that can send them.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Ledger | Problem
    """

    return (
        await asyncio_detailed(
            ledger_id=ledger_id,
            client=client,
            x_ledger_password=x_ledger_password,
        )
    ).parsed
