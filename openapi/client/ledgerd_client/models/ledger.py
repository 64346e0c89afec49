from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.ledger_state_name import LedgerStateName
from typing import cast

if TYPE_CHECKING:
    from ..models.ledger_metadata import LedgerMetadata
    from ..models.offload import Offload


T = TypeVar("T", bound="Ledger")


@_attrs_define
class Ledger:
    """
    Attributes:
        closed_at (float | None): seconds since the epoch
        created_at (float): seconds since the epoch
        entries (int):
        last_add_confirmed (int): -1 while the ledger is empty
        ledger_id (int):
        length (int): total payload bytes
        metadata (LedgerMetadata):
        offload (Offload):
        state (LedgerStateName):
    """

    closed_at: float | None
    created_at: float
    entries: int
    last_add_confirmed: int
    ledger_id: int
    length: int
    metadata: LedgerMetadata
    offload: Offload
    state: LedgerStateName
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from ..models.ledger_metadata import LedgerMetadata  # noqa: PLC0415
        from ..models.offload import Offload  # noqa: PLC0415

        closed_at: float | None
        closed_at = self.closed_at

        created_at = self.created_at

        entries = self.entries

        last_add_confirmed = self.last_add_confirmed

        ledger_id = self.ledger_id

        length = self.length

        metadata = self.metadata.to_dict()

        offload = self.offload.to_dict()

        state = self.state.value

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "closed_at": closed_at,
                "created_at": created_at,
                "entries": entries,
                "last_add_confirmed": last_add_confirmed,
                "ledger_id": ledger_id,
                "length": length,
                "metadata": metadata,
                "offload": offload,
                "state": state,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.ledger_metadata import LedgerMetadata  # noqa: PLC0415
        from ..models.offload import Offload  # noqa: PLC0415

        d = dict(src_dict)

        def _parse_closed_at(data: object) -> float | None:
            if data is None:
                return data
            return cast(float | None, data)

        closed_at = _parse_closed_at(d.pop("closed_at"))

        created_at = d.pop("created_at")

        entries = d.pop("entries")

        last_add_confirmed = d.pop("last_add_confirmed")

        ledger_id = d.pop("ledger_id")

        length = d.pop("length")

        metadata = LedgerMetadata.from_dict(d.pop("metadata"))

        offload = Offload.from_dict(d.pop("offload"))

        state = LedgerStateName(d.pop("state"))

        ledger = cls(
            closed_at=closed_at,
            created_at=created_at,
            entries=entries,
            last_add_confirmed=last_add_confirmed,
            ledger_id=ledger_id,
            length=length,
            metadata=metadata,
            offload=offload,
            state=state,
        )

        ledger.additional_properties = d
        return ledger

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
