from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset


T = TypeVar("T", bound="ReadOnlyRequest")


@_attrs_define
class ReadOnlyRequest:
    """
    Attributes:
        read_only (bool):
    """

    read_only: bool

    def to_dict(self) -> dict[str, Any]:
        read_only = self.read_only

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "read_only": read_only,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        read_only = d.pop("read_only")

        read_only_request = cls(
            read_only=read_only,
        )

        return read_only_request
