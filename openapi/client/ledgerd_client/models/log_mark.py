from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset


T = TypeVar("T", bound="LogMark")


@_attrs_define
class LogMark:
    """The journal's logical offsets in bytes (``Bookie.last_log_mark()``);
    trim <= synced <= appended.

        Attributes:
            appended_offset (int): records up to here are queued
            checkpoint_offset (int): the mark of the last checkpoint: everything before it is in the entry logs and index
            synced_offset (int): records up to here are durable (fdatasync)
            trim_offset (int): the journal is trimmed up to here
    """

    appended_offset: int
    checkpoint_offset: int
    synced_offset: int
    trim_offset: int
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        appended_offset = self.appended_offset

        checkpoint_offset = self.checkpoint_offset

        synced_offset = self.synced_offset

        trim_offset = self.trim_offset

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "appended_offset": appended_offset,
                "checkpoint_offset": checkpoint_offset,
                "synced_offset": synced_offset,
                "trim_offset": trim_offset,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        appended_offset = d.pop("appended_offset")

        checkpoint_offset = d.pop("checkpoint_offset")

        synced_offset = d.pop("synced_offset")

        trim_offset = d.pop("trim_offset")

        log_mark = cls(
            appended_offset=appended_offset,
            checkpoint_offset=checkpoint_offset,
            synced_offset=synced_offset,
            trim_offset=trim_offset,
        )

        log_mark.additional_properties = d
        return log_mark

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
