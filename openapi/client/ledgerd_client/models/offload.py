from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.offload_state_name import OffloadStateName
from ..types import UNSET, Unset
from typing import cast


T = TypeVar("T", bound="Offload")


@_attrs_define
class Offload:
    """
    Attributes:
        bucket (None | str):
        error (None | str):
        key_prefix (None | str):
        local_deleted (bool):
        offloaded_at (float | None): seconds since the epoch
        segment_bytes (int):
        state (OffloadStateName):
        bytes_done (int | None | Unset): while IN_PROGRESS: segment bytes uploaded so far
        bytes_total (int | None | Unset): while IN_PROGRESS: segment bytes to upload in all
        failures (int | Unset): offload attempts that failed in a row Default: 0.
        local_first_entry_id (int | Unset): entries below it have no local copy any more (tiered, then dropped by GC):
            reads of them go to S3 Default: 0.
        next_retry_at (float | None | Unset): while FAILED: when the server retries by itself (seconds since the epoch);
            a request retries at once
        pack_key (None | str | Unset): OFFLOADED in a pack shared with other small ledgers: the pack's data object
            (null: objects of its own under key_prefix)
        tiered_entries (int | Unset): entries in S3 already, tiered while the ledger was open (TIER_OPEN_LEDGERS)
            Default: 0.
    """

    bucket: None | str
    error: None | str
    key_prefix: None | str
    local_deleted: bool
    offloaded_at: float | None
    segment_bytes: int
    state: OffloadStateName
    bytes_done: int | None | Unset = UNSET
    bytes_total: int | None | Unset = UNSET
    failures: int | Unset = 0
    local_first_entry_id: int | Unset = 0
    next_retry_at: float | None | Unset = UNSET
    pack_key: None | str | Unset = UNSET
    tiered_entries: int | Unset = 0
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        bucket: None | str
        bucket = self.bucket

        error: None | str
        error = self.error

        key_prefix: None | str
        key_prefix = self.key_prefix

        local_deleted = self.local_deleted

        offloaded_at: float | None
        offloaded_at = self.offloaded_at

        segment_bytes = self.segment_bytes

        state = self.state.value

        bytes_done: int | None | Unset
        if isinstance(self.bytes_done, Unset):
            bytes_done = UNSET
        else:
            bytes_done = self.bytes_done

        bytes_total: int | None | Unset
        if isinstance(self.bytes_total, Unset):
            bytes_total = UNSET
        else:
            bytes_total = self.bytes_total

        failures = self.failures

        local_first_entry_id = self.local_first_entry_id

        next_retry_at: float | None | Unset
        if isinstance(self.next_retry_at, Unset):
            next_retry_at = UNSET
        else:
            next_retry_at = self.next_retry_at

        pack_key: None | str | Unset
        if isinstance(self.pack_key, Unset):
            pack_key = UNSET
        else:
            pack_key = self.pack_key

        tiered_entries = self.tiered_entries

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "bucket": bucket,
                "error": error,
                "key_prefix": key_prefix,
                "local_deleted": local_deleted,
                "offloaded_at": offloaded_at,
                "segment_bytes": segment_bytes,
                "state": state,
            }
        )
        if bytes_done is not UNSET:
            field_dict["bytes_done"] = bytes_done
        if bytes_total is not UNSET:
            field_dict["bytes_total"] = bytes_total
        if failures is not UNSET:
            field_dict["failures"] = failures
        if local_first_entry_id is not UNSET:
            field_dict["local_first_entry_id"] = local_first_entry_id
        if next_retry_at is not UNSET:
            field_dict["next_retry_at"] = next_retry_at
        if pack_key is not UNSET:
            field_dict["pack_key"] = pack_key
        if tiered_entries is not UNSET:
            field_dict["tiered_entries"] = tiered_entries

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)

        def _parse_bucket(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        bucket = _parse_bucket(d.pop("bucket"))

        def _parse_error(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        error = _parse_error(d.pop("error"))

        def _parse_key_prefix(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        key_prefix = _parse_key_prefix(d.pop("key_prefix"))

        local_deleted = d.pop("local_deleted")

        def _parse_offloaded_at(data: object) -> float | None:
            if data is None:
                return data
            return cast(float | None, data)

        offloaded_at = _parse_offloaded_at(d.pop("offloaded_at"))

        segment_bytes = d.pop("segment_bytes")

        state = OffloadStateName(d.pop("state"))

        def _parse_bytes_done(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        bytes_done = _parse_bytes_done(d.pop("bytes_done", UNSET))

        def _parse_bytes_total(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        bytes_total = _parse_bytes_total(d.pop("bytes_total", UNSET))

        failures = d.pop("failures", UNSET)

        local_first_entry_id = d.pop("local_first_entry_id", UNSET)

        def _parse_next_retry_at(data: object) -> float | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(float | None | Unset, data)

        next_retry_at = _parse_next_retry_at(d.pop("next_retry_at", UNSET))

        def _parse_pack_key(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        pack_key = _parse_pack_key(d.pop("pack_key", UNSET))

        tiered_entries = d.pop("tiered_entries", UNSET)

        offload = cls(
            bucket=bucket,
            error=error,
            key_prefix=key_prefix,
            local_deleted=local_deleted,
            offloaded_at=offloaded_at,
            segment_bytes=segment_bytes,
            state=state,
            bytes_done=bytes_done,
            bytes_total=bytes_total,
            failures=failures,
            local_first_entry_id=local_first_entry_id,
            next_retry_at=next_retry_at,
            pack_key=pack_key,
            tiered_entries=tiered_entries,
        )

        offload.additional_properties = d
        return offload

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
