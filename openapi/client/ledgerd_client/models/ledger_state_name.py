from enum import StrEnum


class LedgerStateName(StrEnum):
    CLOSED = "CLOSED"
    FENCED = "FENCED"
    OPEN = "OPEN"

    def __str__(self) -> str:
        return str(self.value)
