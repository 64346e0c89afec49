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
        force_major (bool | Unset):  Default: False.
        force_minor (bool | Unset):  Default: False.
    """

    force_major: bool | Unset = False
    force_minor: bool | Unset = False

    def to_dict(self) -> dict[str, Any]:
        force_major = self.force_major

        force_minor = self.force_minor

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if force_major is not UNSET:
            field_dict["force_major"] = force_major
        if force_minor is not UNSET:
            field_dict["force_minor"] = force_minor

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        force_major = d.pop("force_major", UNSET)

        force_minor = d.pop("force_minor", UNSET)

        gc_request = cls(
            force_major=force_major,
            force_minor=force_minor,
        )

        return gc_request
