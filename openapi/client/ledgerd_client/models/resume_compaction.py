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
        resumeMajor (bool | Unset): BookKeeper's spelling of `resume_major`
        resumeMinor (bool | Unset): BookKeeper's spelling of `resume_minor`
        resume_major (bool | Unset): absent: false
        resume_minor (bool | Unset): absent: false
    """

    resumeMajor: bool | Unset = UNSET
    resumeMinor: bool | Unset = UNSET
    resume_major: bool | Unset = UNSET
    resume_minor: bool | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        resumeMajor = self.resumeMajor

        resumeMinor = self.resumeMinor

        resume_major = self.resume_major

        resume_minor = self.resume_minor

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if resumeMajor is not UNSET:
            field_dict["resumeMajor"] = resumeMajor
        if resumeMinor is not UNSET:
            field_dict["resumeMinor"] = resumeMinor
        if resume_major is not UNSET:
            field_dict["resume_major"] = resume_major
        if resume_minor is not UNSET:
            field_dict["resume_minor"] = resume_minor

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        resumeMajor = d.pop("resumeMajor", UNSET)

        resumeMinor = d.pop("resumeMinor", UNSET)

        resume_major = d.pop("resume_major", UNSET)

        resume_minor = d.pop("resume_minor", UNSET)

        resume_compaction = cls(
            resumeMajor=resumeMajor,
            resumeMinor=resumeMinor,
            resume_major=resume_major,
            resume_minor=resume_minor,
        )

        return resume_compaction
