"""The real journal (O_DIRECT file, group commit, fdatasync) under a powercut mount.

    python journal_writer.py DEVICE_PATH [--skip-sync] [--sync-mode MODE]

Opens (formats) a journal on DEVICE_PATH, prints ``READY``, then appends from
four threads forever, printing ``ACK <body>`` once an append's future resolves
(the journal's promise: durable).  ``--skip-sync`` hands the journal, through
its constructor seam (``Journal.open(..., device=)``), a device whose ``sync()``
does nothing: the bug the power-loss harness must catch.  ``--sync-mode`` picks
how writes become durable (``journal.SyncMode``; O_DIRECT + fdatasync by
default): every mode must keep every acknowledged record.  There is no such knob
in the service; this wrapper exists only here.
"""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path

from common.units import KiB, MiB
from journal import BlockDevice, DirectDevice, Journal, JournalSettings, SyncMode

HEADER_AREA_BYTES = 8 * KiB
_print_lock = threading.Lock()


class SkipSyncDevice:
    """A DirectDevice whose fdatasync is skipped once ``skipping`` is set
    (test-only).  ``unsynced`` is the same file opened without RWF_DSYNC: in
    that mode a write is durable on return, so skipping the sync means writing
    without the flag."""

    def __init__(self, device: DirectDevice, unsynced: DirectDevice | None = None) -> None:
        self._device = device
        self._unsynced = unsynced or device
        self.path = device.path
        self.size_bytes = device.size_bytes
        self.skipping = False

    def pread(self, offset: int, size: int) -> bytes:
        return self._device.pread(offset, size)

    def pwrite(self, offset: int, data: bytes | memoryview) -> None:
        (self._unsynced if self.skipping else self._device).pwrite(offset, data)

    def sync(self) -> None:
        if not self.skipping:  # the format and the start-up header stay durable
            self._device.sync()

    def close(self) -> None:
        if self._unsynced is not self._device:
            self._unsynced.close()
        self._device.close()


def journal_settings(path: Path,
                     sync_mode: SyncMode = SyncMode.DIRECT_FDATASYNC) -> JournalSettings:
    return JournalSettings(device_path=path, capacity_bytes=4 * MiB,
                           sliding_window_bytes_max=1 * MiB,
                           block_size_bytes_soft_limit=64 * KiB, sync_mode=sync_mode)


def appender(journal: Journal, thread_no: int) -> None:
    for n in range(10**9):
        body = f"{thread_no}:{n}:".encode() + bytes([n % 251]) * (n % 3000)
        journal.append_nowait(body).future.result(timeout=30)
        with _print_lock:
            sys.stdout.write(f"ACK {thread_no}:{n}\n")
            sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("device_path", type=Path)
    parser.add_argument("--skip-sync", action="store_true")
    parser.add_argument("--sync-mode", type=SyncMode, default=SyncMode.DIRECT_FDATASYNC)
    args = parser.parse_args()
    settings = journal_settings(args.device_path, args.sync_mode)
    direct = DirectDevice(args.device_path,
                          create_size_bytes=HEADER_AREA_BYTES + settings.capacity_bytes,
                          sync_mode=settings.sync_mode)
    assert direct.direct_io == (settings.sync_mode is not SyncMode.BUFFERED_FDATASYNC), (
        "the journal file was not opened as its sync mode says")
    unsynced = (DirectDevice(args.device_path, sync_mode=SyncMode.DIRECT_FDATASYNC)
                if settings.sync_mode is SyncMode.DIRECT_DSYNC else None)
    skipper = SkipSyncDevice(direct, unsynced)
    device: BlockDevice = skipper if args.skip_sync else direct
    journal = Journal.open(settings, device=device)
    list(journal.replay())
    journal.start()
    skipper.skipping = True  # from here on, group commits ack without fdatasync
    print("READY", flush=True)
    threads = [threading.Thread(target=appender, args=(journal, t)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


if __name__ == "__main__":
    main()
