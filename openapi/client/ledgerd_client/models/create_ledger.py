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
        metadata (CreateLedgerMetadata | Unset): at most 64 pairs (MAX_METADATA_ENTRIES) of at most 16384 UTF-8 bytes in
            all (MAX_METADATA_SIZE)
        password (str | Unset): at most 1024 UTF-8 bytes (MAX_PASSWORD_SIZE) Default: ''.
    """

    metadata: CreateLedgerMetadata | Unset = UNSET
    password: str | Unset = ""

    def to_dict(self) -> dict[str, Any]:
        from ..models.create_ledger_metadata import CreateLedgerMetadata  # noqa: PLC0415

        metadata: dict[str, Any] | Unset = UNSET
        if not isinstance(self.metadata, Unset):
            metadata = self.metadata.to_dict()

        password = self.password

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if metadata is not UNSET:
            field_dict["metadata"] = metadata
        if password is not UNSET:
            field_dict["password"] = password

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.create_ledger_metadata import CreateLedgerMetadata  # noqa: PLC0415

        d = dict(src_dict)
        _metadata = d.pop("metadata", UNSET)
        metadata: CreateLedgerMetadata | Unset
        if isinstance(_metadata, Unset):
            metadata = UNSET
        else:
            metadata = CreateLedgerMetadata.from_dict(_metadata)

        password = d.pop("password", UNSET)

        create_ledger = cls(
            metadata=metadata,
            password=password,
        )

        return create_ledger
