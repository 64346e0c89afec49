"""``python -m tools.partitions --seeds 1-3 --duration 120 --nodes 5 [--out DIR]``:
one run per seed, each writing DIR/seed-N/{report.md,report.json,history.jsonl},
and DIR/summary.md with one row per run.  Exit 0 when every run's checker found
nothing, 1 when a property was violated, 2 when the lab cannot run here."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import Any

from .checker import PROPERTIES
from .nemesis import FAULTS
from .run import RunConfig, requirements, run


def seeds_of(text: str) -> list[int]:
    seeds: list[int] = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        seeds += range(int(first), int(last or first) + 1)
    return seeds


def summary_row(report: dict[str, Any]) -> str:
    verdicts = " | ".join("ok" if report["verdicts"][p]["ok"]
                          else f"**{report['verdicts'][p]['violations']}**" for p in PROPERTIES)
    faults = ", ".join(w["kind"] for w in report["windows"] if w["kind"] != "calm")
    writes = sum(w["writes_ok"] for w in report["windows"] if w["kind"] != "calm")
    tried = sum(w["writes"] for w in report["windows"] if w["kind"] != "calm")
    calm = next(w for w in report["windows"] if w["kind"] == "calm")
    return (f"| {report['seed']} | {report['duration_s']:g} | {report['nodes']} | "
            f"{report['history_size']} | {report['acked_entries']} | {faults} | "
            f"{writes}/{tried} | {calm['writes_ok']}/{calm['writes']} | "
            f"{report['heal_to_settled_s']} | {verdicts} |")


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds through run()'s finally: lab and children go


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _terminate)
    parser = argparse.ArgumentParser(prog="python -m tools.partitions")
    parser.add_argument("--seeds", default="1")
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--faults", default=",".join(FAULTS))
    parser.add_argument("--out", type=Path, default=Path("data/partitions"))
    args = parser.parse_args(argv)
    missing = requirements()
    if missing:
        print(f"partitions: cannot run, missing: {', '.join(missing)}", file=sys.stderr)
        return 2
    header = ("| seed | s | nodes | history | acked | faults | writes ok in faults | "
              "writes ok calm | settle s | " + " | ".join(PROPERTIES) + " |")
    rows = [header, "|" + " --- |" * (10 + len(PROPERTIES) - 1)]
    failed = False
    for seed in seeds_of(args.seeds):
        report = run(RunConfig(seed=seed, duration_s=args.duration, nodes=args.nodes,
                               faults=tuple(args.faults.split(",")),
                               writers=max(3, args.nodes), out_dir=args.out))
        rows.append(summary_row(report))
        failed |= not all(v["ok"] for v in report["verdicts"].values())
        print(rows[-1], flush=True)
        print(f"  report: {args.out / f'seed-{seed}' / 'report.md'}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.md").write_text("\n".join(rows) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
