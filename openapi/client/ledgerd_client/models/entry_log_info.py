from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from typing import cast


T = TypeVar("T", bound="EntryLogInfo")


@_attrs_define
class EntryLogInfo:
    """
    Attributes:
        ledgers (list[int]):
        log_id (int):
        remaining (int): live bytes
        size (int):
        usage (float): remaining / size
    """

    ledgers: list[int]
    log_id: int
    remaining: int
    size: int
    usage: float
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        ledgers = self.ledgers

        log_id = self.log_id

        remaining = self.remaining

        size = self.size

        usage = self.usage

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "ledgers": ledgers,
                "log_id": log_id,
                "remaining": remaining,
                "size": size,
                "usage": usage,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        ledgers = cast(list[int], d.pop("ledgers"))

        log_id = d.pop("log_id")

        remaining = d.pop("remaining")

        size = d.pop("size")

        usage = d.pop("usage")

        entry_log_info = cls(
            ledgers=ledgers,
            log_id=log_id,
            remaining=remaining,
            size=size,
            usage=usage,
        )

        entry_log_info.additional_properties = d
        return entry_log_info

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
