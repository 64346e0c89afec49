from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast


T = TypeVar("T", bound="GcDetails")


@_attrs_define
class GcDetails:
    """
    Attributes:
        force_compacting (bool | Unset):  Default: False.
        last_major_compaction_time (float | None | Unset):
        last_minor_compaction_time (float | None | Unset):
        major_compacting (bool | Unset):  Default: False.
        major_compaction_count (int | Unset):  Default: 0.
        minor_compacting (bool | Unset):  Default: False.
        minor_compaction_count (int | Unset):  Default: 0.
    """

    force_compacting: bool | Unset = False
    last_major_compaction_time: float | None | Unset = UNSET
    last_minor_compaction_time: float | None | Unset = UNSET
    major_compacting: bool | Unset = False
    major_compaction_count: int | Unset = 0
    minor_compacting: bool | Unset = False
    minor_compaction_count: int | Unset = 0
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        force_compacting = self.force_compacting

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

        major_compacting = self.major_compacting

        major_compaction_count = self.major_compaction_count

        minor_compacting = self.minor_compacting

        minor_compaction_count = self.minor_compaction_count

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({})
        if force_compacting is not UNSET:
            field_dict["force_compacting"] = force_compacting
        if last_major_compaction_time is not UNSET:
            field_dict["last_major_compaction_time"] = last_major_compaction_time
        if last_minor_compaction_time is not UNSET:
            field_dict["last_minor_compaction_time"] = last_minor_compaction_time
        if major_compacting is not UNSET:
            field_dict["major_compacting"] = major_compacting
        if major_compaction_count is not UNSET:
            field_dict["major_compaction_count"] = major_compaction_count
        if minor_compacting is not UNSET:
            field_dict["minor_compacting"] = minor_compacting
        if minor_compaction_count is not UNSET:
            field_dict["minor_compaction_count"] = minor_compaction_count

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        force_compacting = d.pop("force_compacting", UNSET)

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

        major_compacting = d.pop("major_compacting", UNSET)

        major_compaction_count = d.pop("major_compaction_count", UNSET)

        minor_compacting = d.pop("minor_compacting", UNSET)

        minor_compaction_count = d.pop("minor_compaction_count", UNSET)

        gc_details = cls(
            force_compacting=force_compacting,
            last_major_compaction_time=last_major_compaction_time,
            last_minor_compaction_time=last_minor_compaction_time,
            major_compacting=major_compacting,
            major_compaction_count=major_compaction_count,
            minor_compacting=minor_compacting,
            minor_compaction_count=minor_compaction_count,
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
