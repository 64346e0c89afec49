from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from typing import cast

if TYPE_CHECKING:
    from ..models.entry_out import EntryOut


T = TypeVar("T", bound="EntryPage")


@_attrs_define
class EntryPage:
    """
    Attributes:
        entries (list[EntryOut]):
        next_start (int | None): pass as `start` for the rest of the range; null when the range is done
    """

    entries: list[EntryOut]
    next_start: int | None
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from ..models.entry_out import EntryOut  # noqa: PLC0415

        entries = []
        for entries_item_data in self.entries:
            entries_item = entries_item_data.to_dict()
            entries.append(entries_item)

        next_start: int | None
        next_start = self.next_start

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "entries": entries,
                "next_start": next_start,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.entry_out import EntryOut  # noqa: PLC0415

        d = dict(src_dict)
        entries = []
        _entries = d.pop("entries")
        for entries_item_data in _entries:
            entries_item = EntryOut.from_dict(entries_item_data)

            entries.append(entries_item)

        def _parse_next_start(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        next_start = _parse_next_start(d.pop("next_start"))

        entry_page = cls(
            entries=entries,
            next_start=next_start,
        )

        entry_page.additional_properties = d
        return entry_page

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
