"""cluster/ imports only the standard library, common and third-party libraries
(docs/cluster.md; the node and the engine are wired to it from above)."""

from __future__ import annotations

import ast
from pathlib import Path

FORBIDDEN = {"ledger", "app", "offload", "compaction", "node", "journal", "entrylog", "tools",
             "bench", "tests"}


def test_cluster_imports_point_down_only() -> None:
    root = Path(__file__).resolve().parents[2] / "cluster"
    bad = []
    for path in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            bad += [f"{path.name}: {n}" for n in names if n.split(".")[0] in FORBIDDEN]
    assert not bad
