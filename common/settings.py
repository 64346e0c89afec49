"""Setting primitives shared by every component's settings module.

Each component declares its own knobs once, in a frozen keyword-only dataclass
with unit-suffixed fields (``journal/_settings.py``, ``entrylog/_settings.py``,
``ledger/settings.py``, ``compaction/settings.py``, ``offload/settings.py``);
its ``check()`` relates them with :func:`require`, which names the user-facing
setting (DESIGN.md §9 spelling) that is wrong.
"""

from __future__ import annotations

from .errors import InvalidSetting


def require(condition: bool, setting: str, message: str) -> None:
    """Raise :class:`InvalidSetting` naming ``setting`` unless ``condition`` holds."""
    if not condition:
        raise InvalidSetting(f"invalid setting {setting.upper()}: {message}")
