from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset


T = TypeVar("T", bound="ReadOnlyRequest")


@_attrs_define
class ReadOnlyRequest:
    """
    Attributes:
        readOnly (bool | Unset): BookKeeper's spelling of `read_only`
        read_only (bool | Unset): absent: false
    """

    readOnly: bool | Unset = UNSET
    read_only: bool | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        readOnly = self.readOnly

        read_only = self.read_only

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if readOnly is not UNSET:
            field_dict["readOnly"] = readOnly
        if read_only is not UNSET:
            field_dict["read_only"] = read_only

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        readOnly = d.pop("readOnly", UNSET)

        read_only = d.pop("read_only", UNSET)

        read_only_request = cls(
            readOnly=readOnly,
            read_only=read_only,
        )

        return read_only_request
