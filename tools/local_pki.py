"""Certificates made at test time with the ``openssl`` command: a CA, a server
certificate it signs for ``127.0.0.1`` and ``localhost`` (what every loopback
server and cluster node of the tests can present), and a key that matches no
certificate.  ``make_pki(directory, name)`` writes them under ``directory``::

    NAME-ca.pem NAME-ca.key     the CA (EC P-256, two days)
    NAME-server.pem .key        the server certificate (IP:127.0.0.1, DNS:localhost)
    NAME-other.key              a key of no certificate (a mismatching pair)

Two calls with different names give two CAs that do not trust each other's
certificates.  ``openssl`` missing is an error, never a skip.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

_EC = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
_SERVER_EXTENSIONS = (
    "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=critical,CA:FALSE\n"
    "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
    "authorityKeyIdentifier=keyid,issuer\nsubjectKeyIdentifier=hash\n")


@dataclass(frozen=True)
class Pki:
    ca: Path
    cert: Path
    key: Path
    other_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(directory: Path, name: str = "test") -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    ca, server = f"{name}-ca", f"{name}-server"
    _openssl("req", "-x509", *_EC, "-keyout", f"{ca}.key", "-out", f"{ca}.pem", "-days", "2",
             "-subj", f"/CN=ledgerd {name} CA", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=directory)
    _openssl("req", *_EC, "-keyout", f"{server}.key", "-out", f"{server}.csr",
             "-subj", "/CN=localhost", cwd=directory)
    (directory / f"{server}.ext").write_text(_SERVER_EXTENSIONS)
    _openssl("x509", "-req", "-in", f"{server}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
             "-CAcreateserial", "-out", f"{server}.pem", "-days", "2",
             "-extfile", f"{server}.ext", cwd=directory)
    _openssl("genpkey", "-algorithm", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-out", f"{name}-other.key", cwd=directory)
    return Pki(directory / f"{ca}.pem", directory / f"{server}.pem",
               directory / f"{server}.key", directory / f"{name}-other.key")
