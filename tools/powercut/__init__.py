"""Power-loss simulation: a FUSE file system that forgets what was not synced.

(Fault model and method: docs/powerloss.md.)
"""

from ._model import BLOCK_SIZE_BYTES as BLOCK_SIZE_BYTES
from ._model import CutMode as CutMode
from ._model import CutReport as CutReport
from ._model import VolatileFS as VolatileFS
from ._mount import PowercutError as PowercutError
from ._mount import PowercutMount as PowercutMount
from ._mount import fuse_unavailable as fuse_unavailable
from ._trigger import Trigger as Trigger

__all__ = ["BLOCK_SIZE_BYTES", "CutMode", "CutReport", "PowercutError", "PowercutMount",
           "Trigger", "VolatileFS", "fuse_unavailable"]
