"""``python -m tools.powercut serve BACKING MOUNTPOINT [--mode strict|partial] [--seed N]``

Runs the daemon in the foreground (see ``tools/powercut/_fuse.py`` for the
control protocol on stdin/stdout); ``fusermount3 -u MOUNTPOINT`` ends it.
"""

from __future__ import annotations

import argparse

from ._model import CutMode


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.powercut")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="mount and serve until unmounted")
    serve.add_argument("backing", help="the directory that plays the disk")
    serve.add_argument("mountpoint")
    serve.add_argument("--mode", choices=[m.value for m in CutMode], default="strict")
    serve.add_argument("--seed", type=int, default=0,
                       help="seeds which unsynced blocks survive a partial cut")
    args = parser.parse_args()
    from ._fuse import serve as run  # imports libfuse: only when serving

    run(args.backing, args.mountpoint, mode=CutMode(args.mode), seed=args.seed)


if __name__ == "__main__":
    main()
