"""What the CLI prints: results on stdout, one-line problems and progress on stderr.

Errors are one plain line each (``ledgerd: error: ...``), never wrapped and never
a traceback, whatever the terminal; results are JSON or plain columns.  Progress
is a rich bar on a terminal and a plain line every few seconds otherwise (logs
of cron jobs and CI), always ending with the final figures.
"""

from __future__ import annotations

import json
import sys
import time
from types import TracebackType
from typing import Any, Literal

# Exit codes (documented in the package docstring and docs/api.md).
EXIT_OK = 0
EXIT_FAILED = 1  # the server refused the request, or the operation failed
EXIT_USAGE = 2  # bad flags, arguments, settings or input
EXIT_UNREACHABLE = 3  # the server (or S3) could not be reached
EXIT_INTERNAL = 70  # a bug in ledgerd (EX_SOFTWARE)
EXIT_INTERRUPTED = 130  # Ctrl-C

PLAIN_PROGRESS_INTERVAL_S = 5.0


class CliError(Exception):
    """A problem the user can act on: printed as one line, then exit with ``exit_code``."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


def usage_error(message: str) -> CliError:
    return CliError(message, EXIT_USAGE)


def print_error(message: str) -> None:
    # One line: newlines inside a server's detail would break grep-ability.
    line = " ".join(message.split())
    sys.stderr.write(f"ledgerd: error: {line}\n")
    sys.stderr.flush()


def print_note(message: str) -> None:
    sys.stderr.write(f"ledgerd: {message}\n")
    sys.stderr.flush()


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, sort_keys=True) + "\n")
    sys.stdout.flush()


def print_rows(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    """A table: rich on a terminal, whitespace-aligned plain columns in a pipe."""
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.table import Table

        table = Table(*header)
        for row in rows:
            table.add_row(*row)
        Console().print(table)
        return
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    for row in (header, *rows):
        sys.stdout.write("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        sys.stdout.write("\n")


Unit = Literal["bytes", "tasks"]


def _amount(value: float, unit: Unit) -> str:
    if unit == "tasks":
        return str(int(value))
    for suffix, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= size:
            return f"{value / size:.1f} {suffix}"
    return f"{int(value)} B"


class Progress:
    """A bar on stderr: ``with Progress("export", unit="tasks") as bar: bar.update(3, 8)``."""

    def __init__(self, description: str, *, unit: Unit, total: float | None = None) -> None:
        self.description = description
        self.unit = unit
        self.total = total
        self.completed = 0.0
        self.note = ""
        self._started = time.monotonic()
        self._printed_at = self._started
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> Progress:
        if sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeElapsedColumn,
                TransferSpeedColumn,
            )
            from rich.progress import Progress as RichProgress

            amount = ((DownloadColumn(binary_units=True), TransferSpeedColumn())
                      if self.unit == "bytes" else (MofNCompleteColumn(),))
            self._bar = RichProgress(
                TextColumn("{task.description}"), BarColumn(bar_width=24), *amount,
                TextColumn("{task.fields[note]}"), TimeElapsedColumn(),
                console=Console(stderr=True))
            self._bar.__enter__()
            self._task = self._bar.add_task(self.description, total=self.total, note="")
        return self

    def update(self, completed: float, total: float | None = None, *, note: str = "") -> None:
        self.completed = completed
        self.total = total if total is not None else self.total
        self.note = note
        if self._bar is not None:
            self._bar.update(self._task, completed=completed, total=self.total, note=note)
        elif time.monotonic() - self._printed_at >= PLAIN_PROGRESS_INTERVAL_S:
            self._print_line()

    def _print_line(self) -> None:
        self._printed_at = time.monotonic()
        text = _amount(self.completed, self.unit)
        if self.total:
            percent = min(100, int(100 * self.completed / self.total))
            text += f"/{_amount(self.total, self.unit)}"
            text += f" tasks ({percent}%)" if self.unit == "tasks" else f" ({percent}%)"
        elif self.unit == "tasks":
            text += " tasks"
        elapsed_s = self._printed_at - self._started
        if self.unit == "bytes" and elapsed_s > 0:
            text += f", {_amount(self.completed / elapsed_s, 'bytes')}/s"
        note = f", {self.note}" if self.note else ""
        sys.stderr.write(f"{self.description}: {text}{note}, {elapsed_s:.1f} s\n")
        sys.stderr.flush()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._bar is not None:
            self._bar.__exit__(exc_type, exc, tb)
        elif exc_type is None or self.completed:
            self._print_line()
