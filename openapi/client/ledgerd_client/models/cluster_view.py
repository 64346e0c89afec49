from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast

if TYPE_CHECKING:
    from ..models.cluster_node_view import ClusterNodeView
    from ..models.under_replicated import UnderReplicated


T = TypeVar("T", bound="ClusterView")


@_attrs_define
class ClusterView:
    """
    Attributes:
        nodes (list[ClusterNodeView]):
        under_replicated (list[UnderReplicated]):
        auditor (None | str | Unset): bookie id of the node auditing the cluster
        decommissioned (list[str] | Unset): bookies taken out for good (their ids are never accepted again; their
            replicas are re-replicated)
    """

    nodes: list[ClusterNodeView]
    under_replicated: list[UnderReplicated]
    auditor: None | str | Unset = UNSET
    decommissioned: list[str] | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from ..models.cluster_node_view import ClusterNodeView  # noqa: PLC0415
        from ..models.under_replicated import UnderReplicated  # noqa: PLC0415

        nodes = []
        for nodes_item_data in self.nodes:
            nodes_item = nodes_item_data.to_dict()
            nodes.append(nodes_item)

        under_replicated = []
        for under_replicated_item_data in self.under_replicated:
            under_replicated_item = under_replicated_item_data.to_dict()
            under_replicated.append(under_replicated_item)

        auditor: None | str | Unset
        if isinstance(self.auditor, Unset):
            auditor = UNSET
        else:
            auditor = self.auditor

        decommissioned: list[str] | Unset = UNSET
        if not isinstance(self.decommissioned, Unset):
            decommissioned = self.decommissioned

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "nodes": nodes,
                "under_replicated": under_replicated,
            }
        )
        if auditor is not UNSET:
            field_dict["auditor"] = auditor
        if decommissioned is not UNSET:
            field_dict["decommissioned"] = decommissioned

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.cluster_node_view import ClusterNodeView  # noqa: PLC0415
        from ..models.under_replicated import UnderReplicated  # noqa: PLC0415

        d = dict(src_dict)
        nodes = []
        _nodes = d.pop("nodes")
        for nodes_item_data in _nodes:
            nodes_item = ClusterNodeView.from_dict(nodes_item_data)

            nodes.append(nodes_item)

        under_replicated = []
        _under_replicated = d.pop("under_replicated")
        for under_replicated_item_data in _under_replicated:
            under_replicated_item = UnderReplicated.from_dict(
                under_replicated_item_data
            )

            under_replicated.append(under_replicated_item)

        def _parse_auditor(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        auditor = _parse_auditor(d.pop("auditor", UNSET))

        decommissioned = cast(list[str], d.pop("decommissioned", UNSET))

        cluster_view = cls(
            nodes=nodes,
            under_replicated=under_replicated,
            auditor=auditor,
            decommissioned=decommissioned,
        )

        cluster_view.additional_properties = d
        return cluster_view

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
