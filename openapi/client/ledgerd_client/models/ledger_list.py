from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from typing import cast

if TYPE_CHECKING:
    from ..models.ledger import Ledger


T = TypeVar("T", bound="LedgerList")


@_attrs_define
class LedgerList:
    """
    Attributes:
        ledgers (list[Ledger]):
        next_after (int | None): pass as `after` for the next page; null at the end
    """

    ledgers: list[Ledger]
    next_after: int | None
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from ..models.ledger import Ledger  # noqa: PLC0415

        ledgers = []
        for ledgers_item_data in self.ledgers:
            ledgers_item = ledgers_item_data.to_dict()
            ledgers.append(ledgers_item)

        next_after: int | None
        next_after = self.next_after

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "ledgers": ledgers,
                "next_after": next_after,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.ledger import Ledger  # noqa: PLC0415

        d = dict(src_dict)
        ledgers = []
        _ledgers = d.pop("ledgers")
        for ledgers_item_data in _ledgers:
            ledgers_item = Ledger.from_dict(ledgers_item_data)

            ledgers.append(ledgers_item)

        def _parse_next_after(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        next_after = _parse_next_after(d.pop("next_after"))

        ledger_list = cls(
            ledgers=ledgers,
            next_after=next_after,
        )

        ledger_list.additional_properties = d
        return ledger_list

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
