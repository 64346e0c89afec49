"""HTTPS: ``TLS_CERT_FILE`` and ``TLS_KEY_FILE`` (DESIGN.md §9), and
``TLS_CA_FILE``, what a cluster node trusts when it calls https:// peers.

Both set: the server speaks only HTTPS (and WSS) with that certificate (a PEM
file, the chain after the leaf) and its unencrypted PEM private key.  Neither:
plain HTTP.  One without the other is refused by the settings; a file that
cannot be read, or a key that does not match the certificate, is refused here,
at start-up, naming the setting.  Clients trust the certificate through their
usual CA configuration (docs/api.md, "Security").  TLS_CA_FILE is loaded here
too, so that a bundle that does not load stops ``ledgerd serve`` before it listens.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import TypedDict

from cluster import peer_ssl_context
from common.errors import InvalidSetting

from .settings import ServiceSettings


class UvicornTls(TypedDict, total=False):
    ssl_certfile: str
    ssl_keyfile: str


def uvicorn_tls_options(settings: ServiceSettings) -> UvicornTls:
    """``uvicorn.run``'s keyword arguments for the configured TLS (none without
    it), once the files are known to load; raises InvalidSetting."""
    if settings.tls_ca_file is not None:
        _check_readable("TLS_CA_FILE", settings.tls_ca_file)
        peer_ssl_context(settings.tls_ca_file)
    cert, key = settings.tls_cert_file, settings.tls_key_file
    if cert is None or key is None:  # the settings refuse one without the other
        return {}
    _check_readable("TLS_CERT_FILE", cert)
    _check_readable("TLS_KEY_FILE", key)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        # An encrypted key would make OpenSSL prompt on the terminal; the empty
        # password makes it fail instead.
        context.load_cert_chain(cert, key, password=lambda: b"")
    except (ssl.SSLError, OSError) as exc:
        raise InvalidSetting(
            f"invalid settings TLS_CERT_FILE={str(cert)!r}, TLS_KEY_FILE={str(key)!r}: not a "
            f"PEM certificate and its unencrypted PEM private key ({exc})") from exc
    return {"ssl_certfile": str(cert), "ssl_keyfile": str(key)}


def _check_readable(name: str, path: Path) -> None:
    try:
        with path.open("rb") as file:
            file.read(1)
    except OSError as exc:
        raise InvalidSetting(
            f"invalid setting {name}={str(path)!r}: cannot read it: {exc.strerror or exc}"
        ) from exc
