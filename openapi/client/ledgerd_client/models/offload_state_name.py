from enum import StrEnum


class OffloadStateName(StrEnum):
    FAILED = "FAILED"
    IN_PROGRESS = "IN_PROGRESS"
    NONE = "NONE"
    OFFLOADED = "OFFLOADED"
    PENDING = "PENDING"

    def __str__(self) -> str:
        return str(self.value)
