"""The partition suite's short run (docs/partitions.md): one seed, about 30 s, three
nodes and etcd each in its own network namespace, the nemesis's faults on their
links, processes and clocks, a recorded history, and the checker's verdicts.

It needs root, ip/nft/tc, libfaketime and etcd, and FAILS without them (unless a
developer sets LEDGERD_ALLOW_SKIPS=1, as for every real part):
``scripts/install-partition.sh`` and ``scripts/install-etcd.sh`` install them.
Long runs: ``make partitions``.

Every property is asserted.  A property the cluster code is known to violate can be
put in ``KNOWN_FAILING`` while it is being fixed: its violations are then reported
(a warning and the printed report), not failed on.  The three that were there —
lac-monotonic, closed-is-final and exactly-once — hold since docs/cluster.md §8.1
and §6.6 (docs/partitions.md, "After the fixes").
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from tests.conftest import require
from tools.partitions import PROPERTIES, RunConfig, requirements, run

# pause, kill -9 and etcd cut from every node, in 28 s (nemesis.schedule(16, 28)).
SEED = 16
DURATION_S = 28.0
STRICT = False
KNOWN_FAILING: set[str] = set()


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.timeout(150)
def test_a_short_seeded_partition_run_keeps_acked_entries(tmp_path: Path) -> None:
    missing = requirements()
    require(f"the partition lab cannot run here, missing: {', '.join(missing)}"
            if missing else None)
    report = run(RunConfig(seed=SEED, duration_s=DURATION_S, nodes=3, settle_s=15.0,
                           out_dir=tmp_path))
    print((tmp_path / f"seed-{SEED}" / "report.md").read_text())
    verdicts = report["verdicts"]
    assert set(verdicts) == set(PROPERTIES)
    # The run did something: faults were applied and entries acknowledged.
    assert [w["kind"] for w in report["windows"] if w["kind"] != "calm"] == [
        "pause", "kill", "etcd-cut"]
    assert not [w["errors"] for w in report["windows"] if w["errors"]]
    assert report["acked_entries"] > 100, report["ops"]
    strict = [p for p in PROPERTIES if STRICT or p not in KNOWN_FAILING]
    broken = {p: verdicts[p]["examples"] for p in strict if not verdicts[p]["ok"]}
    assert not broken, broken
    for prop in sorted(KNOWN_FAILING - set(strict)):
        if not verdicts[prop]["ok"]:
            warnings.warn(f"known-failing property {prop}: {verdicts[prop]['violations']} "
                          f"violations, e.g. {verdicts[prop]['examples'][:2]}", stacklevel=1)
