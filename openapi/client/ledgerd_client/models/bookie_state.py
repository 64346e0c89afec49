from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset


T = TypeVar("T", bound="BookieState")


@_attrs_define
class BookieState:
    """
    Attributes:
        available_for_high_priority_writes (bool):
        read_only (bool):
        running (bool):
        shutting_down (bool):
    """

    available_for_high_priority_writes: bool
    read_only: bool
    running: bool
    shutting_down: bool
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        available_for_high_priority_writes = self.available_for_high_priority_writes

        read_only = self.read_only

        running = self.running

        shutting_down = self.shutting_down

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "available_for_high_priority_writes": available_for_high_priority_writes,
                "read_only": read_only,
                "running": running,
                "shutting_down": shutting_down,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        available_for_high_priority_writes = d.pop("available_for_high_priority_writes")

        read_only = d.pop("read_only")

        running = d.pop("running")

        shutting_down = d.pop("shutting_down")

        bookie_state = cls(
            available_for_high_priority_writes=available_for_high_priority_writes,
            read_only=read_only,
            running=running,
            shutting_down=shutting_down,
        )

        bookie_state.additional_properties = d
        return bookie_state

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
