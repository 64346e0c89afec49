from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast

if TYPE_CHECKING:
    from ..models.create_ledger_metadata import CreateLedgerMetadata


T = TypeVar("T", bound="CreateLedger")


@_attrs_define
class CreateLedger:
    """
    Attributes:
        ack_quorum (int | None | Unset): cluster mode: copies before the ack (Qa)
        ensemble_size (int | None | Unset): cluster mode: bookies per fragment (E)
        metadata (CreateLedgerMetadata | Unset): at most 64 pairs (MAX_METADATA_ENTRIES) of at most 16384 UTF-8 bytes in
            all (MAX_METADATA_SIZE)
        password (str | Unset): at most 1024 UTF-8 bytes (MAX_PASSWORD_SIZE) Default: ''.
        write_quorum (int | None | Unset): cluster mode: copies of each entry (Qw)
    """

    ack_quorum: int | None | Unset = UNSET
    ensemble_size: int | None | Unset = UNSET
    metadata: CreateLedgerMetadata | Unset = UNSET
    password: str | Unset = ""
    write_quorum: int | None | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        from ..models.create_ledger_metadata import CreateLedgerMetadata  # noqa: PLC0415

        ack_quorum: int | None | Unset
        if isinstance(self.ack_quorum, Unset):
            ack_quorum = UNSET
        else:
            ack_quorum = self.ack_quorum

        ensemble_size: int | None | Unset
        if isinstance(self.ensemble_size, Unset):
            ensemble_size = UNSET
        else:
            ensemble_size = self.ensemble_size

        metadata: dict[str, Any] | Unset = UNSET
        if not isinstance(self.metadata, Unset):
            metadata = self.metadata.to_dict()

        password = self.password

        write_quorum: int | None | Unset
        if isinstance(self.write_quorum, Unset):
            write_quorum = UNSET
        else:
            write_quorum = self.write_quorum

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if ack_quorum is not UNSET:
            field_dict["ack_quorum"] = ack_quorum
        if ensemble_size is not UNSET:
            field_dict["ensemble_size"] = ensemble_size
        if metadata is not UNSET:
            field_dict["metadata"] = metadata
        if password is not UNSET:
            field_dict["password"] = password
        if write_quorum is not UNSET:
            field_dict["write_quorum"] = write_quorum

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.create_ledger_metadata import CreateLedgerMetadata  # noqa: PLC0415

        d = dict(src_dict)

        def _parse_ack_quorum(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        ack_quorum = _parse_ack_quorum(d.pop("ack_quorum", UNSET))

        def _parse_ensemble_size(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        ensemble_size = _parse_ensemble_size(d.pop("ensemble_size", UNSET))

        _metadata = d.pop("metadata", UNSET)
        metadata: CreateLedgerMetadata | Unset
        if isinstance(_metadata, Unset):
            metadata = UNSET
        else:
            metadata = CreateLedgerMetadata.from_dict(_metadata)

        password = d.pop("password", UNSET)

        def _parse_write_quorum(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        write_quorum = _parse_write_quorum(d.pop("write_quorum", UNSET))

        create_ledger = cls(
            ack_quorum=ack_quorum,
            ensemble_size=ensemble_size,
            metadata=metadata,
            password=password,
            write_quorum=write_quorum,
        )

        return create_ledger
