from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from typing import cast

if TYPE_CHECKING:
    from ..models.entry_log_info import EntryLogInfo


T = TypeVar("T", bound="EntryLogList")


@_attrs_define
class EntryLogList:
    """
    Attributes:
        entry_logs (list[EntryLogInfo]):
    """

    entry_logs: list[EntryLogInfo]
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from ..models.entry_log_info import EntryLogInfo  # noqa: PLC0415

        entry_logs = []
        for entry_logs_item_data in self.entry_logs:
            entry_logs_item = entry_logs_item_data.to_dict()
            entry_logs.append(entry_logs_item)

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "entry_logs": entry_logs,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.entry_log_info import EntryLogInfo  # noqa: PLC0415

        d = dict(src_dict)
        entry_logs = []
        _entry_logs = d.pop("entry_logs")
        for entry_logs_item_data in _entry_logs:
            entry_logs_item = EntryLogInfo.from_dict(entry_logs_item_data)

            entry_logs.append(entry_logs_item)

        entry_log_list = cls(
            entry_logs=entry_logs,
        )

        entry_log_list.additional_properties = d
        return entry_log_list

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
