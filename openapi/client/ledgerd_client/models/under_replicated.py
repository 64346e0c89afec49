from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset


T = TypeVar("T", bound="UnderReplicated")


@_attrs_define
class UnderReplicated:
    """
    Attributes:
        bytes_done (int):
        bytes_total (int):
        fragments (int):
        ledger_id (int):
    """

    bytes_done: int
    bytes_total: int
    fragments: int
    ledger_id: int
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        bytes_done = self.bytes_done

        bytes_total = self.bytes_total

        fragments = self.fragments

        ledger_id = self.ledger_id

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "bytes_done": bytes_done,
                "bytes_total": bytes_total,
                "fragments": fragments,
                "ledger_id": ledger_id,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        bytes_done = d.pop("bytes_done")

        bytes_total = d.pop("bytes_total")

        fragments = d.pop("fragments")

        ledger_id = d.pop("ledger_id")

        under_replicated = cls(
            bytes_done=bytes_done,
            bytes_total=bytes_total,
            fragments=fragments,
            ledger_id=ledger_id,
        )

        under_replicated.additional_properties = d
        return under_replicated

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
