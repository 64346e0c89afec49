"""The generated client (``ledgerd_client``) on one httpx connection pool, and the
translation of its answers into results or one-line :class:`CliError`\\ s.

Every call goes through the generated operations except the two it cannot make:
a range read as a frame stream (it sends no ``Accept: application/x-ledgerd-frames``,
parses every 200 as the JSON page, and holds the whole body in memory), which
:meth:`Api.stream_frames` makes with one httpx ``stream()`` call.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import httpx
from ledgerd_client import AuthenticatedClient
from ledgerd_client.models import Problem
from ledgerd_client.types import UNSET, Response, Unset

from common.headers import password_header as password_header

from ._output import EXIT_UNREACHABLE, CliError, usage_error

T = TypeVar("T")

# The server's default HOST and PORT (DESIGN.md §9); a client-side default, since
# client commands must not load the server's settings.
DEFAULT_URL = "http://127.0.0.1:8080"
TIMEOUT_S = 60.0
FRAMES_MEDIA_TYPE = "application/x-ledgerd-frames"

def normalise_url(url: str) -> str:
    """``host:port`` → ``http://host:port``; refuses what cannot be a server URL."""
    url = url.strip().rstrip("/")
    if "://" not in url:
        url = f"http://{url}"
    if not re.match(r"https?://[^/\s]+", url):
        raise usage_error(f"--url {url!r} is not an http:// or https:// URL")
    return url


class Api:
    """One server: ``api.call(lambda c: get_ledger.sync_detailed(7, client=c))``.

    ``password`` and ``token`` are what the user gave (``None``: not given), kept
    to tell "wrong password" apart from "no password given" in error messages.
    """

    def __init__(self, url: str, *, password: str | None = None,
                 token: str | None = None) -> None:
        self.url = normalise_url(url)
        if password is not None and not password.isascii():
            try:
                password.encode()
            except UnicodeEncodeError:  # bytes that are not UTF-8 in argv or the environment
                raise usage_error("--password is not UTF-8 text") from None
        self.password = password
        self.token = token
        headers = {"User-Agent": "ledgerd-cli"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.http = httpx.Client(base_url=self.url, timeout=TIMEOUT_S, headers=headers)
        # An AuthenticatedClient fits every operation (admin ones are typed to want
        # it); ours carries the token only when one was given.
        self.client = AuthenticatedClient(base_url=self.url, token=token or "")
        self.client.set_httpx_client(self.http)

    def __enter__(self) -> Api:
        return self

    def __exit__(self, *exc: object) -> None:
        self.http.close()

    @property
    def password_param(self) -> str | Unset:
        """The generated operations' ``x_ledger_password`` argument."""
        return UNSET if self.password is None else password_header(self.password)

    def call(self, operation: Callable[[AuthenticatedClient], Response[T | Problem]]) -> T:
        """The parsed success of ``operation``, else a :class:`CliError`."""
        return self.checked(self.send(operation))

    def send(self, operation: Callable[[AuthenticatedClient], Response[T | Problem]]
             ) -> Response[T | Problem]:
        """``operation``'s response, whatever its status; transport failures raise."""
        with self.transport_errors():
            try:
                return operation(self.client)
            except (ValueError, KeyError, TypeError) as exc:
                # The generated parser met a body that is not what the spec says
                # (a proxy's HTML error page, a server of another version).
                raise CliError(f"unexpected answer from {self.url}: {exc}") from exc

    def checked(self, response: Response[T | Problem]) -> T:
        parsed = response.parsed
        if isinstance(parsed, Problem):
            raise self.problem_error(parsed.status, parsed.code, parsed.detail)
        if not 200 <= response.status_code < 300:
            raise self.problem_error(int(response.status_code), None,
                                     response.content[:200].decode(errors="replace"))
        return parsed  # type: ignore[return-value]  # None only for bodiless 2xx (204)

    @contextmanager
    def transport_errors(self) -> Iterator[None]:
        try:
            yield
        except httpx.TimeoutException as exc:
            raise CliError(f"{self.url} did not answer within {TIMEOUT_S:.0f} s "
                           f"({type(exc).__name__})", EXIT_UNREACHABLE) from exc
        except httpx.TransportError as exc:
            raise CliError(f"cannot reach {self.url}: {exc or type(exc).__name__} "
                           "(is `ledgerd serve` running there? see --url / LEDGERD_URL)",
                           EXIT_UNREACHABLE) from exc

    def problem_error(self, status: int, code: str | None, detail: str) -> CliError:
        """One line naming the problem, with the hint the user needs to act on it."""
        message = f"{detail} ({code or 'HTTP'} {status})" if detail else f"HTTP {status}"
        if status == 403 and code == "EUA" and self.password is None:
            message = ("this ledger has a password and none was given: pass --password "
                       "or set LEDGERD_PASSWORD (EUA 403)")
        elif status == 401 and not self.token:
            message += "; pass the admin token with --token or LEDGERD_ADMIN_TOKEN"
        return CliError(message)

    @contextmanager
    def stream_frames(self, ledger_id: int, params: dict[str, int]
                      ) -> Iterator[Iterator[bytes]]:
        """The body chunks of a range read as a frame stream (see the module docstring)."""
        with self.transport_errors(), self.http.stream(
                "GET", f"/api/v1/ledgers/{ledger_id}/entries", params=params,
                headers={"Accept": FRAMES_MEDIA_TYPE}) as response:
            if response.status_code != 200:
                response.read()
                try:
                    problem = Problem.from_dict(response.json())
                    raise self.problem_error(problem.status, problem.code, problem.detail)
                except (ValueError, KeyError) as exc:
                    raise self.problem_error(response.status_code, None, response.text[:200]
                                             ) from exc
            yield response.iter_bytes()


def given(value: T | None) -> T | Unset:
    """An optional query parameter for the generated client: absent when None."""
    return UNSET if value is None else value
