from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset


T = TypeVar("T", bound="ResumeCompaction")


@_attrs_define
class ResumeCompaction:
    """
    Attributes:
        resume_major (bool | Unset):  Default: False.
        resume_minor (bool | Unset):  Default: False.
    """

    resume_major: bool | Unset = False
    resume_minor: bool | Unset = False

    def to_dict(self) -> dict[str, Any]:
        resume_major = self.resume_major

        resume_minor = self.resume_minor

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if resume_major is not UNSET:
            field_dict["resume_major"] = resume_major
        if resume_minor is not UNSET:
            field_dict["resume_minor"] = resume_minor

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        resume_major = d.pop("resume_major", UNSET)

        resume_minor = d.pop("resume_minor", UNSET)

        resume_compaction = cls(
            resume_major=resume_major,
            resume_minor=resume_minor,
        )

        return resume_compaction
