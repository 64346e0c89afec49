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
        suspendMajor (bool | Unset): BookKeeper's spelling of `suspend_major`
        suspendMinor (bool | Unset): BookKeeper's spelling of `suspend_minor`
        suspend_major (bool | Unset): absent: false
        suspend_minor (bool | Unset): absent: false
    """

    suspendMajor: bool | Unset = UNSET
    suspendMinor: bool | Unset = UNSET
    suspend_major: bool | Unset = UNSET
    suspend_minor: bool | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        suspendMajor = self.suspendMajor

        suspendMinor = self.suspendMinor

        suspend_major = self.suspend_major

        suspend_minor = self.suspend_minor

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if suspendMajor is not UNSET:
            field_dict["suspendMajor"] = suspendMajor
        if suspendMinor is not UNSET:
            field_dict["suspendMinor"] = suspendMinor
        if suspend_major is not UNSET:
            field_dict["suspend_major"] = suspend_major
        if suspend_minor is not UNSET:
            field_dict["suspend_minor"] = suspend_minor

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        suspendMajor = d.pop("suspendMajor", UNSET)

        suspendMinor = d.pop("suspendMinor", UNSET)

        suspend_major = d.pop("suspend_major", UNSET)

        suspend_minor = d.pop("suspend_minor", UNSET)

        suspend_compaction = cls(
            suspendMajor=suspendMajor,
            suspendMinor=suspendMinor,
            suspend_major=suspend_major,
            suspend_minor=suspend_minor,
        )

        return suspend_compaction
