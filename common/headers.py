"""Client-side HTTP header values of the API (pure): shared by the CLI and the
Spark source, which both talk to nodes over HTTP."""

from __future__ import annotations

import re
from urllib.parse import quote

# X-Ledger-Password (the header's OpenAPI description says the same): plain visible
# ASCII and inner spaces go as they are; anything else as an RFC 8187 ext-value.
_PLAIN_PASSWORD = re.compile(r"[!-~]([ -~]*[!-~])?")
_EXT_MARKER = "utf-8''"


def password_header(password: str) -> str:
    """The ``X-Ledger-Password`` value carrying ``password``.

    HTTP libraries send header values as ASCII (httpx) or Latin-1 (fetch) and
    strip surrounding spaces, so any other password is sent percent-encoded UTF-8
    behind the ``UTF-8''`` marker; so is one that itself begins with the marker.
    """
    if password == "" or (_PLAIN_PASSWORD.fullmatch(password)
                          and not password.lower().startswith(_EXT_MARKER)):
        return password
    return "UTF-8''" + quote(password, safe="")
