from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast

if TYPE_CHECKING:
    from ..models.gc_progress import GcProgress
    from ..models.gc_run import GcRun


T = TypeVar("T", bound="GcDetails")


@_attrs_define
class GcDetails:
    """BookKeeper's gc_details fields, plus totals since start, progress and the
    last run.  Times are Unix seconds.

        Attributes:
            compaction_failures (int | Unset):  Default: 0.
            force_compacting (bool | Unset):  Default: False.
            index_reclaimed_bytes (int | Unset):  Default: 0.
            is_major_gc_suspended (bool | Unset):  Default: False.
            is_minor_gc_suspended (bool | Unset):  Default: False.
            last_gc_time (float | None | Unset):
            last_major_compaction_time (float | None | Unset):
            last_minor_compaction_time (float | None | Unset):
            last_run (GcRun | None | Unset):
            local_copies_dropped (int | Unset):  Default: 0.
            logs_compacted (int | Unset):  Default: 0.
            logs_removed (int | Unset):  Default: 0.
            major_compacting (bool | Unset):  Default: False.
            major_compaction_count (int | Unset):  Default: 0.
            minor_compacting (bool | Unset):  Default: False.
            minor_compaction_count (int | Unset):  Default: 0.
            moved_bytes (int | Unset):  Default: 0.
            moved_entries (int | Unset):  Default: 0.
            progress (GcProgress | Unset): The compaction running now (``running`` false between runs).
            reclaimed_by_compaction_bytes (int | Unset):  Default: 0.
            reclaimed_by_deletion_bytes (int | Unset):  Default: 0.
            run_time_s_total (float | Unset):  Default: 0.0.
            runs (int | Unset):  Default: 0.
            tiered_ranges_dropped (int | Unset):  Default: 0.
    """

    compaction_failures: int | Unset = 0
    force_compacting: bool | Unset = False
    index_reclaimed_bytes: int | Unset = 0
    is_major_gc_suspended: bool | Unset = False
    is_minor_gc_suspended: bool | Unset = False
    last_gc_time: float | None | Unset = UNSET
    last_major_compaction_time: float | None | Unset = UNSET
    last_minor_compaction_time: float | None | Unset = UNSET
    last_run: GcRun | None | Unset = UNSET
    local_copies_dropped: int | Unset = 0
    logs_compacted: int | Unset = 0
    logs_removed: int | Unset = 0
    major_compacting: bool | Unset = False
    major_compaction_count: int | Unset = 0
    minor_compacting: bool | Unset = False
    minor_compaction_count: int | Unset = 0
    moved_bytes: int | Unset = 0
    moved_entries: int | Unset = 0
    progress: GcProgress | Unset = UNSET
    reclaimed_by_compaction_bytes: int | Unset = 0
    reclaimed_by_deletion_bytes: int | Unset = 0
    run_time_s_total: float | Unset = 0.0
    runs: int | Unset = 0
    tiered_ranges_dropped: int | Unset = 0
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from ..models.gc_progress import GcProgress  # noqa: PLC0415
        from ..models.gc_run import GcRun  # noqa: PLC0415

        compaction_failures = self.compaction_failures

        force_compacting = self.force_compacting

        index_reclaimed_bytes = self.index_reclaimed_bytes

        is_major_gc_suspended = self.is_major_gc_suspended

        is_minor_gc_suspended = self.is_minor_gc_suspended

        last_gc_time: float | None | Unset
        if isinstance(self.last_gc_time, Unset):
            last_gc_time = UNSET
        else:
            last_gc_time = self.last_gc_time

        last_major_compaction_time: float | None | Unset
        if isinstance(self.last_major_compaction_time, Unset):
            last_major_compaction_time = UNSET
        else:
            last_major_compaction_time = self.last_major_compaction_time

        last_minor_compaction_time: float | None | Unset
        if isinstance(self.last_minor_compaction_time, Unset):
            last_minor_compaction_time = UNSET
        else:
            last_minor_compaction_time = self.last_minor_compaction_time

        last_run: dict[str, Any] | None | Unset
        if isinstance(self.last_run, Unset):
            last_run = UNSET
        elif isinstance(self.last_run, GcRun):
            last_run = self.last_run.to_dict()
        else:
            last_run = self.last_run

        local_copies_dropped = self.local_copies_dropped

        logs_compacted = self.logs_compacted

        logs_removed = self.logs_removed

        major_compacting = self.major_compacting

        major_compaction_count = self.major_compaction_count

        minor_compacting = self.minor_compacting

        minor_compaction_count = self.minor_compaction_count

        moved_bytes = self.moved_bytes

        moved_entries = self.moved_entries

        progress: dict[str, Any] | Unset = UNSET
        if not isinstance(self.progress, Unset):
            progress = self.progress.to_dict()

        reclaimed_by_compaction_bytes = self.reclaimed_by_compaction_bytes

        reclaimed_by_deletion_bytes = self.reclaimed_by_deletion_bytes

        run_time_s_total = self.run_time_s_total

        runs = self.runs

        tiered_ranges_dropped = self.tiered_ranges_dropped

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({})
        if compaction_failures is not UNSET:
            field_dict["compaction_failures"] = compaction_failures
        if force_compacting is not UNSET:
            field_dict["force_compacting"] = force_compacting
        if index_reclaimed_bytes is not UNSET:
            field_dict["index_reclaimed_bytes"] = index_reclaimed_bytes
        if is_major_gc_suspended is not UNSET:
            field_dict["is_major_gc_suspended"] = is_major_gc_suspended
        if is_minor_gc_suspended is not UNSET:
            field_dict["is_minor_gc_suspended"] = is_minor_gc_suspended
        if last_gc_time is not UNSET:
            field_dict["last_gc_time"] = last_gc_time
        if last_major_compaction_time is not UNSET:
            field_dict["last_major_compaction_time"] = last_major_compaction_time
        if last_minor_compaction_time is not UNSET:
            field_dict["last_minor_compaction_time"] = last_minor_compaction_time
        if last_run is not UNSET:
            field_dict["last_run"] = last_run
        if local_copies_dropped is not UNSET:
            field_dict["local_copies_dropped"] = local_copies_dropped
        if logs_compacted is not UNSET:
            field_dict["logs_compacted"] = logs_compacted
        if logs_removed is not UNSET:
            field_dict["logs_removed"] = logs_removed
        if major_compacting is not UNSET:
            field_dict["major_compacting"] = major_compacting
        if major_compaction_count is not UNSET:
            field_dict["major_compaction_count"] = major_compaction_count
        if minor_compacting is not UNSET:
            field_dict["minor_compacting"] = minor_compacting
        if minor_compaction_count is not UNSET:
            field_dict["minor_compaction_count"] = minor_compaction_count
        if moved_bytes is not UNSET:
            field_dict["moved_bytes"] = moved_bytes
        if moved_entries is not UNSET:
            field_dict["moved_entries"] = moved_entries
        if progress is not UNSET:
            field_dict["progress"] = progress
        if reclaimed_by_compaction_bytes is not UNSET:
            field_dict["reclaimed_by_compaction_bytes"] = reclaimed_by_compaction_bytes
        if reclaimed_by_deletion_bytes is not UNSET:
            field_dict["reclaimed_by_deletion_bytes"] = reclaimed_by_deletion_bytes
        if run_time_s_total is not UNSET:
            field_dict["run_time_s_total"] = run_time_s_total
        if runs is not UNSET:
            field_dict["runs"] = runs
        if tiered_ranges_dropped is not UNSET:
            field_dict["tiered_ranges_dropped"] = tiered_ranges_dropped

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.gc_progress import GcProgress  # noqa: PLC0415
        from ..models.gc_run import GcRun  # noqa: PLC0415

        d = dict(src_dict)
        compaction_failures = d.pop("compaction_failures", UNSET)

        force_compacting = d.pop("force_compacting", UNSET)

        index_reclaimed_bytes = d.pop("index_reclaimed_bytes", UNSET)

        is_major_gc_suspended = d.pop("is_major_gc_suspended", UNSET)

        is_minor_gc_suspended = d.pop("is_minor_gc_suspended", UNSET)

        def _parse_last_gc_time(data: object) -> float | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(float | None | Unset, data)

        last_gc_time = _parse_last_gc_time(d.pop("last_gc_time", UNSET))

        def _parse_last_major_compaction_time(data: object) -> float | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(float | None | Unset, data)

        last_major_compaction_time = _parse_last_major_compaction_time(
            d.pop("last_major_compaction_time", UNSET)
        )

        def _parse_last_minor_compaction_time(data: object) -> float | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(float | None | Unset, data)

        last_minor_compaction_time = _parse_last_minor_compaction_time(
            d.pop("last_minor_compaction_time", UNSET)
        )

        def _parse_last_run(data: object) -> GcRun | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                last_run_type_0 = GcRun.from_dict(data)

                return last_run_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(GcRun | None | Unset, data)

        last_run = _parse_last_run(d.pop("last_run", UNSET))

        local_copies_dropped = d.pop("local_copies_dropped", UNSET)

        logs_compacted = d.pop("logs_compacted", UNSET)

        logs_removed = d.pop("logs_removed", UNSET)

        major_compacting = d.pop("major_compacting", UNSET)

        major_compaction_count = d.pop("major_compaction_count", UNSET)

        minor_compacting = d.pop("minor_compacting", UNSET)

        minor_compaction_count = d.pop("minor_compaction_count", UNSET)

        moved_bytes = d.pop("moved_bytes", UNSET)

        moved_entries = d.pop("moved_entries", UNSET)

        _progress = d.pop("progress", UNSET)
        progress: GcProgress | Unset
        if isinstance(_progress, Unset):
            progress = UNSET
        else:
            progress = GcProgress.from_dict(_progress)

        reclaimed_by_compaction_bytes = d.pop("reclaimed_by_compaction_bytes", UNSET)

        reclaimed_by_deletion_bytes = d.pop("reclaimed_by_deletion_bytes", UNSET)

        run_time_s_total = d.pop("run_time_s_total", UNSET)

        runs = d.pop("runs", UNSET)

        tiered_ranges_dropped = d.pop("tiered_ranges_dropped", UNSET)

        gc_details = cls(
            compaction_failures=compaction_failures,
            force_compacting=force_compacting,
            index_reclaimed_bytes=index_reclaimed_bytes,
            is_major_gc_suspended=is_major_gc_suspended,
            is_minor_gc_suspended=is_minor_gc_suspended,
            last_gc_time=last_gc_time,
            last_major_compaction_time=last_major_compaction_time,
            last_minor_compaction_time=last_minor_compaction_time,
            last_run=last_run,
            local_copies_dropped=local_copies_dropped,
            logs_compacted=logs_compacted,
            logs_removed=logs_removed,
            major_compacting=major_compacting,
            major_compaction_count=major_compaction_count,
            minor_compacting=minor_compacting,
            minor_compaction_count=minor_compaction_count,
            moved_bytes=moved_bytes,
            moved_entries=moved_entries,
            progress=progress,
            reclaimed_by_compaction_bytes=reclaimed_by_compaction_bytes,
            reclaimed_by_deletion_bytes=reclaimed_by_deletion_bytes,
            run_time_s_total=run_time_s_total,
            runs=runs,
            tiered_ranges_dropped=tiered_ranges_dropped,
        )

        gc_details.additional_properties = d
        return gc_details

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
