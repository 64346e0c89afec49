from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from typing import cast

if TYPE_CHECKING:
    from ..models.fragment_view import FragmentView


T = TypeVar("T", bound="LedgerPlacement")


@_attrs_define
class LedgerPlacement:
    """Where a ledger's entries live in cluster mode.

    Attributes:
        ack_quorum (int):
        ensemble_size (int):
        epoch (int): the writer's epoch
        fragments (list[FragmentView]):
        ledger_id (int):
        revision (int): etcd revision of the metadata
        state (str): OPEN | IN_RECOVERY | CLOSED (the metadata's state)
        write_quorum (int):
        writer (str): bookie id of the node writing the ledger
    """

    ack_quorum: int
    ensemble_size: int
    epoch: int
    fragments: list[FragmentView]
    ledger_id: int
    revision: int
    state: str
    write_quorum: int
    writer: str
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from ..models.fragment_view import FragmentView  # noqa: PLC0415

        ack_quorum = self.ack_quorum

        ensemble_size = self.ensemble_size

        epoch = self.epoch

        fragments = []
        for fragments_item_data in self.fragments:
            fragments_item = fragments_item_data.to_dict()
            fragments.append(fragments_item)

        ledger_id = self.ledger_id

        revision = self.revision

        state = self.state

        write_quorum = self.write_quorum

        writer = self.writer

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "ack_quorum": ack_quorum,
                "ensemble_size": ensemble_size,
                "epoch": epoch,
                "fragments": fragments,
                "ledger_id": ledger_id,
                "revision": revision,
                "state": state,
                "write_quorum": write_quorum,
                "writer": writer,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.fragment_view import FragmentView  # noqa: PLC0415

        d = dict(src_dict)
        ack_quorum = d.pop("ack_quorum")

        ensemble_size = d.pop("ensemble_size")

        epoch = d.pop("epoch")

        fragments = []
        _fragments = d.pop("fragments")
        for fragments_item_data in _fragments:
            fragments_item = FragmentView.from_dict(fragments_item_data)

            fragments.append(fragments_item)

        ledger_id = d.pop("ledger_id")

        revision = d.pop("revision")

        state = d.pop("state")

        write_quorum = d.pop("write_quorum")

        writer = d.pop("writer")

        ledger_placement = cls(
            ack_quorum=ack_quorum,
            ensemble_size=ensemble_size,
            epoch=epoch,
            fragments=fragments,
            ledger_id=ledger_id,
            revision=revision,
            state=state,
            write_quorum=write_quorum,
            writer=writer,
        )

        ledger_placement.additional_properties = d
        return ledger_placement

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
