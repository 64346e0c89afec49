"""Contains all the data models used in inputs/outputs"""

from .batch_added import BatchAdded
from .batch_append import BatchAppend
from .bookie_info import BookieInfo
from .bookie_state import BookieState
from .cluster_node_view import ClusterNodeView
from .cluster_view import ClusterView
from .compaction_suspension import CompactionSuspension
from .create_ledger import CreateLedger
from .create_ledger_metadata import CreateLedgerMetadata
from .decommissioned import Decommissioned
from .disk_file import DiskFile
from .disk_file_list import DiskFileList
from .entry_added import EntryAdded
from .entry_log_info import EntryLogInfo
from .entry_log_list import EntryLogList
from .entry_out import EntryOut
from .entry_page import EntryPage
from .error_code import ErrorCode
from .fragment_view import FragmentView
from .gc_details import GcDetails
from .gc_progress import GcProgress
from .gc_request import GcRequest
from .gc_run import GcRun
from .gc_status import GcStatus
from .heartbeat import Heartbeat
from .ledger import Ledger
from .ledger_list import LedgerList
from .ledger_metadata import LedgerMetadata
from .ledger_placement import LedgerPlacement
from .ledger_state_name import LedgerStateName
from .log_mark import LogMark
from .offload import Offload
from .offload_state_name import OffloadStateName
from .problem import Problem
from .read_only_request import ReadOnlyRequest
from .read_only_state import ReadOnlyState
from .readiness import Readiness
from .resume_compaction import ResumeCompaction
from .suspend_compaction import SuspendCompaction
from .under_replicated import UnderReplicated

__all__ = (
    "BatchAdded",
    "BatchAppend",
    "BookieInfo",
    "BookieState",
    "ClusterNodeView",
    "ClusterView",
    "CompactionSuspension",
    "CreateLedger",
    "CreateLedgerMetadata",
    "Decommissioned",
    "DiskFile",
    "DiskFileList",
    "EntryAdded",
    "EntryLogInfo",
    "EntryLogList",
    "EntryOut",
    "EntryPage",
    "ErrorCode",
    "FragmentView",
    "GcDetails",
    "GcProgress",
    "GcRequest",
    "GcRun",
    "GcStatus",
    "Heartbeat",
    "Ledger",
    "LedgerList",
    "LedgerMetadata",
    "LedgerPlacement",
    "LedgerStateName",
    "LogMark",
    "Offload",
    "OffloadStateName",
    "Problem",
    "Readiness",
    "ReadOnlyRequest",
    "ReadOnlyState",
    "ResumeCompaction",
    "SuspendCompaction",
    "UnderReplicated",
)
