"""Tiered offload of sealed ledgers to S3, tiering of open ones as they fill,
and reads of them back.

Public surface (everything else is private to the package):

- :class:`OffloadService` — the worker the app owns: ``start()``/``stop()``,
  ``request_offload(ledger_id)``, ``on_ledger_closed``, ``offload_by_disk_usage``,
  ``delete_objects``, ``sweep_orphans``, ``progress``, ``statistics``; its
  ``reader`` is the :class:`RemoteLedgerReader` to attach to the bookie.
- :class:`RemoteLedgerReader` — ``read_entry(ledger_id, entry_id, info)`` for
  ledgers whose local copy is gone (ranged GETs, read-ahead, CRC checks).
- :class:`Offloader` and :class:`Step` — one ledger's offload state machine
  (which consolidates the chunks of a ledger tiered while open).
- :class:`Packer` — packs small sealed ledgers into shared objects
  (``OFFLOAD_PACK``), rewrites and deletes packs, resolves packs cut short;
  :func:`packable` and :func:`pack_frame_bytes` say which ledgers it takes,
  :func:`points_into` which members of a pack are live, :class:`PackTable`
  tallies packs' live bytes, :func:`decode_pack_index` reads a pack's index
  (cluster mode runs the packer on its own ledger source, docs/cluster.md §10.1).
- :class:`Tierer` and :class:`TierStep` — one step of tiering an open ledger
  (``TIER_OPEN_LEDGERS``); :class:`TierWorker` the thread that runs them over
  the open ledgers a source lists, each step under a :class:`StepGuard`
  (standalone: a :class:`LedgerGuard`; cluster mode: the ledger's offload lock
  in etcd, docs/cluster.md §10.2); :func:`frame_bytes` and
  :func:`tiered_bytes` measure a ledger's frames and what of them is tiered.
- :class:`OffloadSettings` (:mod:`offload.settings`), :class:`LedgerSource` (the
  engine seam), :class:`ObjectStore` (the S3 seam): :class:`S3ObjectStore` is
  boto3 (:class:`BotoObjectStore`, one attempt per request) wrapped in
  :class:`RetryingObjectStore`, which retries ``TransientStorageError``; fault
  injection and test doubles plug in between the two; implementations raise
  :class:`ObjectNotFound`, :class:`UploadNotFound`, :class:`TransientStorageError`
  and :class:`RemoteStorageError`.  :class:`KeyLayout`.

Layout in the bucket (docs/formats-offload.md has the byte tables)::

    {prefix}/{cluster}/{bookie_id}/ledgers/{ledger_id}/seg-{first_entry_id}/
        segment                 the frames of the segment's entries: one PUT, or
                                one multipart upload of chunk_size parts
        index                   entry id -> byte offset points, ledger facts, CRC
        chunk-{byte_position}   chunk layout only (ledgers tiered while open, until
                                consolidated at close; offloads of earlier
                                versions): the segment's bytes from byte_position
    {prefix}/{cluster}/{bookie_id}/packs/{pack_id}/
        data                    OFFLOAD_PACK: small sealed ledgers one after another,
                                each its segment's frames then its segment index
        index                   the members (ledger id, offset, lengths) and their
                                indexes, written after ``data`` (_pack_format.py)

Lifecycle of one ledger: NONE → PENDING (requested) → IN_PROGRESS (worker
started it; the multipart upload being written is persisted with its parts)
→ OFFLOADED, or FAILED with the error (retried by itself with capped,
jittered backoff, or at once on request).  After
``OFFLOAD_DELETION_LAG`` GC drops the local copy and reads go to S3.

Invariants:

1. Only CLOSED ledgers are offloaded (open ones are tiered, in the same cut);
   entries never change, so the same settings always give the same segments,
   chunks and bytes.
2. Every non-final multipart part is exactly ``chunk_size`` (>= 5 MiB) bytes,
   cut at multiples of it; a part is skipped on resume only if the upload
   holds it with the size and MD5 of the bytes the entries give now.
3. A ledger is marked OFFLOADED only after each segment's size and ETag are
   verified and its index written, and after every other upload under its
   prefix is aborted and its chunks deleted; every state that can leave stray
   objects is PENDING or IN_PROGRESS and resumed at start.
4. Every entry read back has its CRC32C checked; bytes that fail are an error
   (``CorruptRecord`` naming the object key), never data.
5. Keys are built only from settings that ``OffloadSettings.check()`` accepted.
6. Tiering an open ledger writes each chunk before the index covering it and
   that index before the engine records the position: a recorded position
   never claims bytes S3 lacks, and local entries are dropped only below it.
7. Chunks are deleted only once every segment of the ledger is complete
   (``segment`` + final ``index``): while any entry may exist nowhere else,
   its chunk stays.
8. A packed ledger's record points at a pack only once the pack's ``data``
   was verified and its ``index`` written; a rewrite repoints every live
   member in one checkpoint before the old pack is deleted (after
   ``pack_delete_delay_s``); a pack no record points at is garbage, deleted
   at start (``_packer.py``).
"""

from __future__ import annotations

from ._errors import ObjectNotFound as ObjectNotFound
from ._errors import RemoteStorageError as RemoteStorageError
from ._errors import TransientStorageError as TransientStorageError
from ._errors import UploadNotFound as UploadNotFound
from ._format import frame_bytes as frame_bytes
from ._keys import KeyLayout as KeyLayout
from ._offloader import Offloader as Offloader
from ._offloader import Step as Step
from ._offloader import StepHook as StepHook
from ._pack_format import decode_pack_index as decode_pack_index
from ._packer import Packer as Packer
from ._packer import PackTable as PackTable
from ._packer import pack_frame_bytes as pack_frame_bytes
from ._packer import packable as packable
from ._packer import points_into as points_into
from ._progress import Progress as Progress
from ._reader import RemoteLedgerReader as RemoteLedgerReader
from ._retrying import RetryingObjectStore as RetryingObjectStore
from ._s3 import BotoObjectStore as BotoObjectStore
from ._s3 import S3ObjectStore as S3ObjectStore
from ._s3 import make_s3_client as make_s3_client
from ._service import OffloadService as OffloadService
from ._service import open_object_store as open_object_store
from ._source import LedgerSource as LedgerSource
from ._source import PackSource as PackSource
from ._store import ObjectInfo as ObjectInfo
from ._store import ObjectStore as ObjectStore
from ._store import PartInfo as PartInfo
from ._store import PendingUpload as PendingUpload
from ._tier_worker import LedgerGuard as LedgerGuard
from ._tier_worker import StepGuard as StepGuard
from ._tier_worker import TierWorker as TierWorker
from ._tiering import Tierer as Tierer
from ._tiering import TierHook as TierHook
from ._tiering import TierStep as TierStep
from ._tiering import tiered_bytes as tiered_bytes
from .settings import OffloadSettings as OffloadSettings
