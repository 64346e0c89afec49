"""The seeded simulation of cluster mode (tests/cluster/simulation.py) in CI.

1,000 seeds with the real rules must keep every invariant of docs/cluster.md §11;
each deliberately broken rule, injected through the constructor, must be caught
by some seed (otherwise the simulation proves nothing).
"""

from __future__ import annotations

import pytest

from cluster import ReadEntry, RecoveryRules, Replica, ReplicaRules, WriterRules
from tests.cluster.simulation import InvariantBroken, Simulation, main

SEEDS = range(1000)


def failing_seeds(seeds: range, **variant: object) -> dict[int, InvariantBroken]:
    failures = {}
    for seed in seeds:
        try:
            Simulation(seed, **variant).run()  # type: ignore[arg-type]
        except InvariantBroken as exc:
            failures[seed] = exc
    return failures


def first_failing_seed(seeds: range, **variant: object) -> tuple[int, InvariantBroken] | None:
    """The first seed of ``seeds`` that breaks an invariant, and how (None: none)."""
    for seed in seeds:
        try:
            Simulation(seed, **variant).run()  # type: ignore[arg-type]
        except InvariantBroken as exc:
            return seed, exc
    return None


def test_a_thousand_seeds_keep_every_invariant() -> None:
    failures = failing_seeds(SEEDS)
    assert not failures, "replay with: python -m tests.cluster.simulation --seed N -v\n" + \
        "\n".join(f"seed {s}: {e}" for s, e in sorted(failures.items())[:10])


def test_the_runs_do_real_work() -> None:
    """Guard against a simulation that passes because nothing happens."""
    runs = [Simulation(seed).run() for seed in range(30)]
    assert sum(len(r.acked) for r in runs) > 300
    assert sum(r.takeovers for r in runs) > 30
    # A read needs its end first, and the end from the bookies only once entry
    # LAC + 1 is absent from Qw - Qa + 1 distinct bookies: fewer than one per seed.
    assert sum(r.reads_checked for r in runs) > 100
    # Bookies whose disk failed refused journaled requests, and writers went on.
    assert sum(r.disk_refusals for r in runs) > 30


def test_a_seed_replays_exactly() -> None:
    traces: list[list[str]] = [[], []]
    for trace in traces:
        Simulation(42, verbose=True, out=trace.append).run()
    assert traces[0] == traces[1]
    assert len(traces[0]) > 50


def test_the_command_line_replays_one_seed(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--seed", "3"]) == 0
    assert "seed 3: ok" in capsys.readouterr().out


class AcceptsOlderEpochs(ReplicaRules):
    """Broken: a bookie that accepts adds of an older epoch after a fence."""

    def refuses_epoch(self, replica: Replica, epoch: int) -> bool:
        return False


class LacWithoutAckQuorum(WriterRules):
    """Broken: the LAC advances on one ack, whatever Qa says."""

    def reached_ack_quorum(self, ack_count: int, ack_quorum: int) -> bool:
        return ack_count >= 1


class NonFencingRecoveryReads(RecoveryRules):
    """Broken the way BookKeeper was before 4.14 (#2614): recovery reads do not fence."""

    def recovery_read(self, ledger_id: int, entry_id: int, epoch: int) -> ReadEntry:
        return ReadEntry(ledger_id, entry_id)


def test_a_bookie_accepting_older_epochs_is_caught() -> None:
    failures = failing_seeds(range(30), replica_rules=AcceptsOlderEpochs())
    assert any(e.number == 6 for e in failures.values()), failures


def test_a_lac_computed_without_the_ack_quorum_is_caught() -> None:
    failures = failing_seeds(range(30), writer_rules=LacWithoutAckQuorum())
    # Invariant 2 (the writer's LAC over an entry with fewer than Qa replicas) is
    # seen a step before invariant 1 (the client's ack of it): the driver resolves
    # the client's token, and the client hears of it in the loop's next callback.
    assert any(e.number in (1, 2) for e in failures.values()), failures


def test_bookkeepers_fencing_defect_is_caught() -> None:
    """With frequent takeovers of live writers, some seed loses an acknowledged
    entry when recovery reads do not fence: about 1 in 300 since a writer sends
    each bookie one call per turn (a write-back is one call, not one per entry),
    so the first such seed is searched for, up to 3,000.  That seed and the 99
    before it pass with fencing recovery reads (they are part of the thousand
    above only at the default takeover rate, so check them here)."""
    found = first_failing_seed(range(3000), recovery_rules=NonFencingRecoveryReads(),
                               takeover_p=0.6, lease_exclusion=False)
    assert found is not None, "the defect was not found"
    seed, broken = found
    # The lost entry was acknowledged (1), or its writer's LAC already covers it
    # (2: the step before the client hears of the ack).
    assert broken.number in (1, 2), broken
    assert not failing_seeds(range(max(0, seed - 99), seed + 1), takeover_p=0.6,
                             lease_exclusion=False)


def test_trusting_a_writer_without_its_lease_is_caught() -> None:
    """Invariant 10 (a named end never goes back): a node that keeps its writers and
    answers their LAC after its lease lapsed, when another node may have taken over
    and recovered past them, is caught."""
    failures = failing_seeds(range(200), trusts_lapsed_writer=True)
    assert any(e.number == 10 for e in failures.values()), failures


def test_an_end_from_the_bookies_without_the_probe_is_caught() -> None:
    """Invariant 10: the bookies' LAC lags the writer's acks until its next add or
    explicit LAC; a node that names it without checking entry LAC + 1 is caught."""
    failures = failing_seeds(range(200), probes_past_lac=False)
    assert any(e.number == 10 for e in failures.values()), failures


def test_a_takeover_decided_on_the_view_alone_is_caught() -> None:
    """Invariant 10: a node's view of the members lags a new registration by a watch
    event; a node that takes over a ledger because its view does not list the
    writer yet, while the writer holds its lease and answers reads with its LAC,
    is caught (the node asks etcd first: Writers._writer_alive).  Frequent takeovers
    make it likely (about one seed in eight); the seeds up to the first that
    fails pass with the node's rule."""
    found = first_failing_seed(range(400), takeover_on_view=True, takeover_p=0.5)
    assert found is not None, "the defect was not found"
    seed, broken = found
    assert broken.number == 10, broken
    assert not failing_seeds(range(max(0, seed - 20), seed + 1), takeover_p=0.5)
