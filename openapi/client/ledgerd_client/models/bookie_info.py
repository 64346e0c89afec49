from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from typing import cast


T = TypeVar("T", bound="BookieInfo")


@_attrs_define
class BookieInfo:
    """
    Attributes:
        bookie_id (str):
        cluster (str):
        data_dir (None | str): admins only: null without the admin token when ADMIN_TOKEN is set
        free_space (int):
        gc_enabled (bool):
        journal_device (None | str): admins only: null without the admin token when ADMIN_TOKEN is set
        offload_enabled (bool):
        read_only (bool):
        total_space (int):
        version (str):
    """

    bookie_id: str
    cluster: str
    data_dir: None | str
    free_space: int
    gc_enabled: bool
    journal_device: None | str
    offload_enabled: bool
    read_only: bool
    total_space: int
    version: str
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        bookie_id = self.bookie_id

        cluster = self.cluster

        data_dir: None | str
        data_dir = self.data_dir

        free_space = self.free_space

        gc_enabled = self.gc_enabled

        journal_device: None | str
        journal_device = self.journal_device

        offload_enabled = self.offload_enabled

        read_only = self.read_only

        total_space = self.total_space

        version = self.version

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "bookie_id": bookie_id,
                "cluster": cluster,
                "data_dir": data_dir,
                "free_space": free_space,
                "gc_enabled": gc_enabled,
                "journal_device": journal_device,
                "offload_enabled": offload_enabled,
                "read_only": read_only,
                "total_space": total_space,
                "version": version,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        bookie_id = d.pop("bookie_id")

        cluster = d.pop("cluster")

        def _parse_data_dir(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        data_dir = _parse_data_dir(d.pop("data_dir"))

        free_space = d.pop("free_space")

        gc_enabled = d.pop("gc_enabled")

        def _parse_journal_device(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        journal_device = _parse_journal_device(d.pop("journal_device"))

        offload_enabled = d.pop("offload_enabled")

        read_only = d.pop("read_only")

        total_space = d.pop("total_space")

        version = d.pop("version")

        bookie_info = cls(
            bookie_id=bookie_id,
            cluster=cluster,
            data_dir=data_dir,
            free_space=free_space,
            gc_enabled=gc_enabled,
            journal_device=journal_device,
            offload_enabled=offload_enabled,
            read_only=read_only,
            total_space=total_space,
            version=version,
        )

        bookie_info.additional_properties = d
        return bookie_info

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
