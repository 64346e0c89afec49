"""Export the app's OpenAPI document to ``openapi/openapi.json``, or check it for drift.

    python openapi/export.py            # (re)write openapi/openapi.json
    python openapi/export.py --check    # exit 1, with a diff, if the file is stale

The output is deterministic: sorted keys, two-space indent, one trailing newline,
and independent of the settings in the environment.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC_PATH = ROOT / "openapi" / "openapi.json"


def render() -> str:
    if str(ROOT) not in sys.path:
        sys.path.append(str(ROOT))
    from app.main import openapi_document

    return openapi_document()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the file is stale")
    parser.add_argument("--output", type=Path, default=SPEC_PATH)
    args = parser.parse_args(argv)
    fresh = render()
    if not args.check:
        args.output.write_text(fresh, encoding="utf-8")
        print(f"wrote {args.output}")
        return 0
    current = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
    if current == fresh:
        print(f"{args.output.name} is up to date")
        return 0
    diff = difflib.unified_diff(
        current.splitlines(keepends=True),
        fresh.splitlines(keepends=True),
        fromfile=f"{args.output.name} (checked in)",
        tofile=f"{args.output.name} (from app)",
    )
    lines = list(diff)
    sys.stderr.writelines(lines[:200])
    if len(lines) > 200:
        sys.stderr.write(f"... {len(lines) - 200} more diff lines\n")
    sys.stderr.write(
        "\nopenapi/openapi.json is out of date with app/: run `make openapi` "
        "(python openapi/export.py, then openapi/generate_client.sh) and commit the "
        "result.\n"
    )
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
