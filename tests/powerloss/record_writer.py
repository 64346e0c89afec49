"""A tiny durable-log writer for the harness's own tests: run under a powercut mount.

    python record_writer.py PATH [--sync|--no-sync] [--direct]

Creates PATH (file and directory entry synced), prints ``READY``, then appends
4 KiB records forever, printing ``ACK n`` after record ``n`` is durable: after
fdatasync with ``--sync``; right after the write with ``--no-sync`` (the bug the
harness must catch).  ``--direct`` opens the file with O_DIRECT (preallocated,
aligned buffers), as the journal does: O_DIRECT alone does not make a write
durable.  Record ``n`` is ``MAGIC + n`` as 8 big-endian bytes repeated over 4 KiB
(never zeros, so a preallocated slot never looks written).
"""

from __future__ import annotations

import argparse
import mmap
import os
import struct
import sys

RECORD_BYTES = 4096
PREALLOCATED_RECORDS = 4096
MAGIC = 0x5245_4344_0000_0000  # "RECD"


def record(n: int) -> bytes:
    return struct.pack(">Q", MAGIC + n) * (RECORD_BYTES // 8)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("path")
    parser.add_argument("--sync", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--direct", action="store_true")
    args = parser.parse_args()
    fd = os.open(args.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    if args.direct:
        os.posix_fallocate(fd, 0, PREALLOCATED_RECORDS * RECORD_BYTES)
    os.fsync(fd)
    directory = os.open(os.path.dirname(os.path.abspath(args.path)), os.O_RDONLY)
    os.fsync(directory)
    os.close(directory)
    if args.direct:
        os.close(fd)
        fd = os.open(args.path, os.O_RDWR | os.O_DIRECT)
    buffer = mmap.mmap(-1, RECORD_BYTES)  # page aligned, as O_DIRECT needs
    print("READY", flush=True)
    for n in range(PREALLOCATED_RECORDS):
        buffer[:] = record(n)
        os.pwrite(fd, buffer, n * RECORD_BYTES)
        if args.sync:
            os.fdatasync(fd)
        sys.stdout.write(f"ACK {n}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
