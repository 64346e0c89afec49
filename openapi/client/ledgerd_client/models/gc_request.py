from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset


T = TypeVar("T", bound="GcRequest")


@_attrs_define
class GcRequest:
    """
    Attributes:
        forceMajor (bool | Unset): BookKeeper's spelling of `force_major`
        forceMinor (bool | Unset): BookKeeper's spelling of `force_minor`
        force_major (bool | Unset): absent: false
        force_minor (bool | Unset): absent: false
    """

    forceMajor: bool | Unset = UNSET
    forceMinor: bool | Unset = UNSET
    force_major: bool | Unset = UNSET
    force_minor: bool | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        forceMajor = self.forceMajor

        forceMinor = self.forceMinor

        force_major = self.force_major

        force_minor = self.force_minor

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if forceMajor is not UNSET:
            field_dict["forceMajor"] = forceMajor
        if forceMinor is not UNSET:
            field_dict["forceMinor"] = forceMinor
        if force_major is not UNSET:
            field_dict["force_major"] = force_major
        if force_minor is not UNSET:
            field_dict["force_minor"] = force_minor

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        forceMajor = d.pop("forceMajor", UNSET)

        forceMinor = d.pop("forceMinor", UNSET)

        force_major = d.pop("force_major", UNSET)

        force_minor = d.pop("force_minor", UNSET)

        gc_request = cls(
            forceMajor=forceMajor,
            forceMinor=forceMinor,
            force_major=force_major,
            force_minor=force_minor,
        )

        return gc_request
