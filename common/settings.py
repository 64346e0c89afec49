"""Setting primitives shared by every component's settings module.

Each component declares its own knobs once, in a frozen keyword-only dataclass
with unit-suffixed fields (``journal/_settings.py``, ``entrylog/_settings.py``,
``ledger/_settings.py``, ``compaction/_settings.py``, ``offload/settings.py``,
``node/_settings.py``); its ``check()`` relates them with :func:`require`, which
names the user-facing setting (DESIGN.md §9 spelling) that is wrong.  The
user-facing loader (``app/settings.py``) parses sizes and durations with
:func:`parse_size` and :func:`parse_duration` and takes its defaults from those
dataclasses (:func:`default_of`), so each default is written once.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from .errors import InvalidSetting, InvariantViolation
from .units import GiB, KiB, MiB, TiB


def require(condition: bool, setting: str, message: str) -> None:
    """Raise :class:`InvalidSetting` naming ``setting`` unless ``condition`` holds."""
    if not condition:
        raise InvalidSetting(f"invalid setting {setting.upper()}: {message}")


_SIZE_UNITS: dict[str, int] = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": KiB,
    "mib": MiB,
    "gib": GiB,
    "tib": TiB,
}
_TIME_UNITS: dict[str, float] = {
    "": 1.0,
    "ms": 0.001,
    "s": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
    "d": 86400.0,
}
_QUANTITY = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$")


def parse_size(value: object) -> object:
    """``64MiB`` → 67108864; ints pass through; anything else is left to pydantic."""
    if isinstance(value, str):
        match = _QUANTITY.match(value)
        if match is None or match.group(2).lower() not in _SIZE_UNITS:
            raise ValueError(f"{value!r} is not a size (bytes, or e.g. '64MiB', '1GiB', '10MB')")
        number = float(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]
        if number != int(number):
            raise ValueError(f"{value!r} is not a whole number of bytes")
        return int(number)
    return value


def parse_duration(value: object) -> object:
    """``5m`` → 300.0; numbers pass through; anything else is left to pydantic."""
    if isinstance(value, str):
        match = _QUANTITY.match(value)
        if match is None or match.group(2).lower() not in _TIME_UNITS:
            raise ValueError(f"{value!r} is not a duration (seconds, or e.g. '10s', '5m', '1h')")
        return float(match.group(1)) * _TIME_UNITS[match.group(2).lower()]
    return value


def default_of(settings_class: type[Any], field_name: str) -> Any:
    """The default a settings dataclass declares for ``field_name``."""
    for field in dataclasses.fields(settings_class):
        if field.name == field_name:
            if field.default is not dataclasses.MISSING:
                return field.default
            if field.default_factory is not dataclasses.MISSING:
                return field.default_factory()
    raise InvariantViolation(f"{settings_class.__name__}.{field_name} declares no default")
