"""The knobs of cluster mode, declared once (STYLE 4; DESIGN §9's names in the
checks' messages).  ``app/settings.py`` maps METADATA_URL, ADVERTISED_URL,
CLUSTER_TOKEN, ENSEMBLE_SIZE, WRITE_QUORUM, ACK_QUORUM, MEMBERSHIP_TTL,
REREPLICATION_DELAY, OPEN_LEDGER_REREPLICATION_GRACE_PERIOD, AUDIT_INTERVAL,
AUDIT_FULL_INTERVAL and TLS_CA_FILE onto these fields; the rest are internal with
defaults."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from common.settings import require

from ._writer import ADD_TIMEOUT_S


@dataclass(frozen=True, kw_only=True)
class ClusterSettings:
    # METADATA_URL = etcd://HOST:PORT[,HOST:PORT…]/SCOPE, parsed (parse_metadata_url).
    etcd_endpoints: tuple[str, ...]
    scope: str
    # The URL other nodes reach this one at (ADVERTISED_URL, default http://HOST:PORT,
    # https:// with TLS_CERT_FILE).
    advertised_url: str
    # Bearer token of node-to-node calls (CLUSTER_TOKEN); required.
    token: str = field(repr=False)
    # Defaults for new ledgers (ENSEMBLE_SIZE, WRITE_QUORUM, ACK_QUORUM).
    ensemble_size: int = 3
    write_quorum: int = 3
    ack_quorum: int = 2
    # The lease of this node's registration (MEMBERSHIP_TTL); etcd counts whole seconds.
    membership_ttl_s: float = 10.0
    # How long a bookie may be gone before its replicas are copied (REREPLICATION_DELAY).
    rereplication_delay_s: float = 60.0
    # An OPEN ledger whose last fragment names a bookie gone this long, and which
    # received no add meanwhile, is fenced and closed by the auditor so that its
    # fragments can be re-replicated (OPEN_LEDGER_REREPLICATION_GRACE_PERIOD;
    # BookKeeper's openLedgerRereplicationGracePeriod, 30 s): a writer replaces a
    # dead bookie only when an add meets it.
    open_ledger_rereplication_grace_period_s: float = 30.0
    # A bookie that has not answered an add this long is replaced (ensemble change).
    add_timeout_s: float = ADD_TIMEOUT_S
    # Machines notice timeouts on a tick this often (the simulation's 100 ms).
    tick_interval_s: float = 0.1
    # The auditor's rounds: each looks at the ledgers whose metadata changed, and at
    # every ledger when a bookie came or went (docs/cluster.md §9).
    audit_interval_s: float = 5.0
    # ... and at every ledger this often regardless (BookKeeper: once a week).
    audit_full_interval_s: float = 7 * 24 * 3600.0
    # Node-to-node calls give up after this long (BookieUnreachable).
    call_timeout_s: float = 5.0
    # The CAs (PEM bundle) trusted for https:// peers (TLS_CA_FILE); None: the system's.
    tls_ca_file: Path | None = None

    def check(self) -> None:
        e, qw, qa = self.ensemble_size, self.write_quorum, self.ack_quorum
        require(qa >= 1, "ack_quorum", f"must be at least 1, got {qa}")
        require(qw >= qa, "write_quorum", f"must be at least ACK_QUORUM ({qa}), got {qw}")
        require(e >= qw, "ensemble_size", f"must be at least WRITE_QUORUM ({qw}), got {e}")
        require(bool(self.token), "cluster_token", "must be set in cluster mode")
        require(bool(self.etcd_endpoints) and bool(self.scope), "metadata_url",
                "needs at least one etcd endpoint and a scope")
        require(self.advertised_url.startswith(("http://", "https://")), "advertised_url",
                f"must be an http(s) URL, got {self.advertised_url!r}")
        require(self.membership_ttl_s >= 1, "membership_ttl", "must be at least 1 second")
        require(self.rereplication_delay_s >= 0, "rereplication_delay",
                "must not be negative")
        for name in ("open_ledger_rereplication_grace_period_s", "add_timeout_s",
                     "tick_interval_s", "audit_interval_s",
                     "audit_full_interval_s", "call_timeout_s"):
            require(getattr(self, name) > 0, name, "must be positive")
