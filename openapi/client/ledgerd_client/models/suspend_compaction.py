from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset


T = TypeVar("T", bound="SuspendCompaction")


@_attrs_define
class SuspendCompaction:
    """
    Attributes:
        suspend_major (bool | Unset):  Default: False.
        suspend_minor (bool | Unset):  Default: False.
    """

    suspend_major: bool | Unset = False
    suspend_minor: bool | Unset = False

    def to_dict(self) -> dict[str, Any]:
        suspend_major = self.suspend_major

        suspend_minor = self.suspend_minor

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if suspend_major is not UNSET:
            field_dict["suspend_major"] = suspend_major
        if suspend_minor is not UNSET:
            field_dict["suspend_minor"] = suspend_minor

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        suspend_major = d.pop("suspend_major", UNSET)

        suspend_minor = d.pop("suspend_minor", UNSET)

        suspend_compaction = cls(
            suspend_major=suspend_major,
            suspend_minor=suspend_minor,
        )

        return suspend_compaction
