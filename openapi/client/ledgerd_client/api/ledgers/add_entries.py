from http import HTTPStatus
from typing import Any, cast
from urllib.parse import quote

import httpx

from ...client import AuthenticatedClient, Client
from ...types import Response, UNSET
from ... import errors

from ...models.batch_added import BatchAdded
from ...models.batch_append import BatchAppend
from ...models.problem import Problem
from ...types import File, FileTypes
from ...types import UNSET, Unset
from io import BytesIO
from typing import cast


def _get_kwargs(
    ledger_id: int,
    *,
    body: BatchAppend | File | Unset = UNSET,
    first_entry_id: int | Unset = UNSET,
    x_ledger_password: str | Unset = UNSET,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}
    if not isinstance(x_ledger_password, Unset):
        headers["X-Ledger-Password"] = x_ledger_password

    params: dict[str, Any] = {}

    params["first_entry_id"] = first_entry_id

    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/api/v1/ledgers/{ledger_id}/entries/batch".format(
            ledger_id=quote(str(ledger_id), safe=""),
        ),
        "params": params,
    }

    if isinstance(body, BatchAppend):
        _kwargs["json"] = body.to_dict()

        headers["Content-Type"] = "application/json"
    if isinstance(body, File):
        _kwargs["content"] = body.payload
        headers["Content-Type"] = "application/x-ledgerd-frames"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> BatchAdded | Problem | None:
    if response.status_code == 200:
        response_200 = BatchAdded.from_dict(response.json())

        return response_200

    if response.status_code == 201:
        response_201 = BatchAdded.from_dict(response.json())

        return response_201

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

    if response.status_code == 413:
        response_413 = Problem.from_dict(response.json())

        return response_413

    if response.status_code == 415:
        response_415 = Problem.from_dict(response.json())

        return response_415

    if response.status_code == 422:
        response_422 = Problem.from_dict(response.json())

        return response_422

    if response.status_code == 500:
        response_500 = Problem.from_dict(response.json())

        return response_500

    if response.status_code == 503:
        response_503 = Problem.from_dict(response.json())

        return response_503

    if response.status_code == 507:
        response_507 = Problem.from_dict(response.json())

        return response_507

    if client.raise_on_unexpected_status:
        raise errors.UnexpectedStatus(response.status_code, response.content)
    else:
        return None


def _build_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Response[BatchAdded | Problem]:
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
    body: BatchAppend | File | Unset = UNSET,
    first_entry_id: int | Unset = UNSET,
    x_ledger_password: str | Unset = UNSET,
) -> Response[BatchAdded | Problem]:
    """Add Entries

     Append several entries, all or nothing; the whole body is validated first.

    Args:
        ledger_id (int): ledger id (0 ≤ id ≤ 2^63-1)
        first_entry_id (int | Unset): idempotent append: the id the first entry must get (the
            whole batch already there from it: 200 with it)
        x_ledger_password (str | Unset): The ledger's password (missing = empty password). Plain
            ASCII is sent as is. Any other password (non-ASCII, control characters, leading or
            trailing spaces, or text that itself begins with `UTF-8''`) is sent as an RFC 8187 ext-
            value: `UTF-8''` followed by its UTF-8 bytes percent-encoded, e.g. `pässwörd` →
            `UTF-8''p%C3%A4ssw%C3%B6rd` (JavaScript: `"UTF-8''" + encodeURIComponent(pw)`; Python:
            `"UTF-8''" + urllib.parse.quote(pw, safe="")`). Raw UTF-8 header bytes are also
            understood, for clients that can send them.
        body (BatchAppend):
        body (File):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[BatchAdded | Problem]
    """

    kwargs = _get_kwargs(
        ledger_id=ledger_id,
        body=body,
        first_entry_id=first_entry_id,
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
    body: BatchAppend | File | Unset = UNSET,
    first_entry_id: int | Unset = UNSET,
    x_ledger_password: str | Unset = UNSET,
) -> BatchAdded | Problem | None:
    """Add Entries

     Append several entries, all or nothing; the whole body is validated first.

    Args:
        ledger_id (int): ledger id (0 ≤ id ≤ 2^63-1)
        first_entry_id (int | Unset): idempotent append: the id the first entry must get (the
            whole batch already there from it: 200 with it)
        x_ledger_password (str | Unset): The ledger's password (missing = empty password). Plain
            ASCII is sent as is. Any other password (non-ASCII, control characters, leading or
            trailing spaces, or text that itself begins with `UTF-8''`) is sent as an RFC 8187 ext-
            value: `UTF-8''` followed by its UTF-8 bytes percent-encoded, e.g. `pässwörd` →
            `UTF-8''p%C3%A4ssw%C3%B6rd` (JavaScript: `"UTF-8''" + encodeURIComponent(pw)`; Python:
            `"UTF-8''" + urllib.parse.quote(pw, safe="")`). Raw UTF-8 header bytes are also
            understood, for clients that can send them.
        body (BatchAppend):
        body (File):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        BatchAdded | Problem
    """

    return sync_detailed(
        ledger_id=ledger_id,
        client=client,
        body=body,
        first_entry_id=first_entry_id,
        x_ledger_password=x_ledger_password,
    ).parsed


async def asyncio_detailed(
    ledger_id: int,
    *,
    client: AuthenticatedClient | Client,
    body: BatchAppend | File | Unset = UNSET,
    first_entry_id: int | Unset = UNSET,
    x_ledger_password: str | Unset = UNSET,
) -> Response[BatchAdded | Problem]:
    """Add Entries

     Append several entries, all or nothing; the whole body is validated first.

    Args:
        ledger_id (int): ledger id (0 ≤ id ≤ 2^63-1)
        first_entry_id (int | Unset): idempotent append: the id the first entry must get (the
            whole batch already there from it: 200 with it)
        x_ledger_password (str | Unset): The ledger's password (missing = empty password). Plain
            ASCII is sent as is. Any other password (non-ASCII, control characters, leading or
            trailing spaces, or text that itself begins with `UTF-8''`) is sent as an RFC 8187 ext-
            value: `UTF-8''` followed by its UTF-8 bytes percent-encoded, e.g. `pässwörd` →
            `UTF-8''p%C3%A4ssw%C3%B6rd` (JavaScript: `"UTF-8''" + encodeURIComponent(pw)`; Python:
            `"UTF-8''" + urllib.parse.quote(pw, safe="")`). Raw UTF-8 header bytes are also
            understood, for clients that can send them.
        body (BatchAppend):
        body (File):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[BatchAdded | Problem]
    """

    kwargs = _get_kwargs(
        ledger_id=ledger_id,
        body=body,
        first_entry_id=first_entry_id,
        x_ledger_password=x_ledger_password,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    ledger_id: int,
    *,
    client: AuthenticatedClient | Client,
    body: BatchAppend | File | Unset = UNSET,
    first_entry_id: int | Unset = UNSET,
    x_ledger_password: str | Unset = UNSET,
) -> BatchAdded | Problem | None:
    """Add Entries

     Append several entries, all or nothing; the whole body is validated first.

    Args:
        ledger_id (int): ledger id (0 ≤ id ≤ 2^63-1)
        first_entry_id (int | Unset): idempotent append: the id the first entry must get (the
            whole batch already there from it: 200 with it)
        x_ledger_password (str | Unset): The ledger's password (missing = empty password). Plain
            ASCII is sent as is. Any other password (non-ASCII, control characters, leading or
            trailing spaces, or text that itself begins with `UTF-8''`) is sent as an RFC 8187 ext-
            value: `UTF-8''` followed by its UTF-8 bytes percent-encoded, e.g. `pässwörd` →
            `UTF-8''p%C3%A4ssw%C3%B6rd` (JavaScript: `"UTF-8''" + encodeURIComponent(pw)`; Python:
            `"UTF-8''" + urllib.parse.quote(pw, safe="")`). Raw UTF-8 header bytes are also
            understood, for clients that can send them.
        body (BatchAppend):
        body (File):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        BatchAdded | Problem
    """

    return (
        await asyncio_detailed(
            ledger_id=ledger_id,
            client=client,
            body=body,
            first_entry_id=first_entry_id,
            x_ledger_password=x_ledger_password,
        )
    ).parsed
