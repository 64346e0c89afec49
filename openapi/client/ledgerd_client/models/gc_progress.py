from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast


T = TypeVar("T", bound="GcProgress")


@_attrs_define
class GcProgress:
    """The compaction running now (``running`` false between runs).

    Attributes:
        bytes_done (int | Unset):  Default: 0.
        bytes_total (int | Unset):  Default: 0.
        kind (str | Unset): major or minor Default: ''.
        log_id (int | None | Unset): entry log being compacted
        running (bool | Unset):  Default: False.
    """

    bytes_done: int | Unset = 0
    bytes_total: int | Unset = 0
    kind: str | Unset = ""
    log_id: int | None | Unset = UNSET
    running: bool | Unset = False
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        bytes_done = self.bytes_done

        bytes_total = self.bytes_total

        kind = self.kind

        log_id: int | None | Unset
        if isinstance(self.log_id, Unset):
            log_id = UNSET
        else:
            log_id = self.log_id

        running = self.running

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({})
        if bytes_done is not UNSET:
            field_dict["bytes_done"] = bytes_done
        if bytes_total is not UNSET:
            field_dict["bytes_total"] = bytes_total
        if kind is not UNSET:
            field_dict["kind"] = kind
        if log_id is not UNSET:
            field_dict["log_id"] = log_id
        if running is not UNSET:
            field_dict["running"] = running

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        bytes_done = d.pop("bytes_done", UNSET)

        bytes_total = d.pop("bytes_total", UNSET)

        kind = d.pop("kind", UNSET)

        def _parse_log_id(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        log_id = _parse_log_id(d.pop("log_id", UNSET))

        running = d.pop("running", UNSET)

        gc_progress = cls(
            bytes_done=bytes_done,
            bytes_total=bytes_total,
            kind=kind,
            log_id=log_id,
            running=running,
        )

        gc_progress.additional_properties = d
        return gc_progress

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
