from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast


T = TypeVar("T", bound="GcRun")


@_attrs_define
class GcRun:
    """What one GC run did.

    Attributes:
        duration_s (float):
        errors (list[str]):
        forced (bool):
        local_copies_dropped (int):
        logs_compacted (int):
        logs_removed (int):
        major (bool):
        minor (bool):
        moved_bytes (int):
        moved_entries (int):
        reclaimed_by_compaction_bytes (int):
        reclaimed_by_deletion_bytes (int):
        skipped (list[str]): compactions not run, and why
        started_at (float):
        index_reclaimed_bytes (int | Unset): bytes the RocksDB index shrank by, compacting deleted ranges Default: 0.
        tiered_ranges_dropped (int | Unset): ledgers whose tiered entries left the local disk Default: 0.
    """

    duration_s: float
    errors: list[str]
    forced: bool
    local_copies_dropped: int
    logs_compacted: int
    logs_removed: int
    major: bool
    minor: bool
    moved_bytes: int
    moved_entries: int
    reclaimed_by_compaction_bytes: int
    reclaimed_by_deletion_bytes: int
    skipped: list[str]
    started_at: float
    index_reclaimed_bytes: int | Unset = 0
    tiered_ranges_dropped: int | Unset = 0
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        duration_s = self.duration_s

        errors = self.errors

        forced = self.forced

        local_copies_dropped = self.local_copies_dropped

        logs_compacted = self.logs_compacted

        logs_removed = self.logs_removed

        major = self.major

        minor = self.minor

        moved_bytes = self.moved_bytes

        moved_entries = self.moved_entries

        reclaimed_by_compaction_bytes = self.reclaimed_by_compaction_bytes

        reclaimed_by_deletion_bytes = self.reclaimed_by_deletion_bytes

        skipped = self.skipped

        started_at = self.started_at

        index_reclaimed_bytes = self.index_reclaimed_bytes

        tiered_ranges_dropped = self.tiered_ranges_dropped

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "duration_s": duration_s,
                "errors": errors,
                "forced": forced,
                "local_copies_dropped": local_copies_dropped,
                "logs_compacted": logs_compacted,
                "logs_removed": logs_removed,
                "major": major,
                "minor": minor,
                "moved_bytes": moved_bytes,
                "moved_entries": moved_entries,
                "reclaimed_by_compaction_bytes": reclaimed_by_compaction_bytes,
                "reclaimed_by_deletion_bytes": reclaimed_by_deletion_bytes,
                "skipped": skipped,
                "started_at": started_at,
            }
        )
        if index_reclaimed_bytes is not UNSET:
            field_dict["index_reclaimed_bytes"] = index_reclaimed_bytes
        if tiered_ranges_dropped is not UNSET:
            field_dict["tiered_ranges_dropped"] = tiered_ranges_dropped

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        duration_s = d.pop("duration_s")

        errors = cast(list[str], d.pop("errors"))

        forced = d.pop("forced")

        local_copies_dropped = d.pop("local_copies_dropped")

        logs_compacted = d.pop("logs_compacted")

        logs_removed = d.pop("logs_removed")

        major = d.pop("major")

        minor = d.pop("minor")

        moved_bytes = d.pop("moved_bytes")

        moved_entries = d.pop("moved_entries")

        reclaimed_by_compaction_bytes = d.pop("reclaimed_by_compaction_bytes")

        reclaimed_by_deletion_bytes = d.pop("reclaimed_by_deletion_bytes")

        skipped = cast(list[str], d.pop("skipped"))

        started_at = d.pop("started_at")

        index_reclaimed_bytes = d.pop("index_reclaimed_bytes", UNSET)

        tiered_ranges_dropped = d.pop("tiered_ranges_dropped", UNSET)

        gc_run = cls(
            duration_s=duration_s,
            errors=errors,
            forced=forced,
            local_copies_dropped=local_copies_dropped,
            logs_compacted=logs_compacted,
            logs_removed=logs_removed,
            major=major,
            minor=minor,
            moved_bytes=moved_bytes,
            moved_entries=moved_entries,
            reclaimed_by_compaction_bytes=reclaimed_by_compaction_bytes,
            reclaimed_by_deletion_bytes=reclaimed_by_deletion_bytes,
            skipped=skipped,
            started_at=started_at,
            index_reclaimed_bytes=index_reclaimed_bytes,
            tiered_ranges_dropped=tiered_ranges_dropped,
        )

        gc_run.additional_properties = d
        return gc_run

    @property
    def additional_keys(self) -> list[str]:
        return list(self.additional_properties.keys())

    def __getitem__(self, key: str) -> Any:
        return self.additional_properties[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.additional_properties[key] = value

    def __delitem__(self, key: str) -> None:
        del self.additional_properties[key]

    def __contains__(self, key: str) -> bool:
        return key in self.additional_properties
