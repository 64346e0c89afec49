from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from typing import cast


T = TypeVar("T", bound="BatchAppend")


@_attrs_define
class BatchAppend:
    """
    Attributes:
        entries (list[str]): base64-encoded payloads, appended in order
    """

    entries: list[str]

    def to_dict(self) -> dict[str, Any]:
        entries = self.entries

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "entries": entries,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        entries = cast(list[str], d.pop("entries"))

        batch_append = cls(
            entries=entries,
        )

        return batch_append
