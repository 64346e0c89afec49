from enum import StrEnum


class ErrorCode(StrEnum):
    EBADREQ = "EBADREQ"
    ECLOSED = "ECLOSED"
    ECONFLICT = "ECONFLICT"
    EFENCED = "EFENCED"
    EIO = "EIO"
    ENOENTRY = "ENOENTRY"
    ENOLEDGER = "ENOLEDGER"
    ENOTSEALED = "ENOTSEALED"
    EREADONLY = "EREADONLY"
    ETOOMANYLEDGERS = "ETOOMANYLEDGERS"
    ETOOMANYREQUESTS = "ETOOMANYREQUESTS"
    EUA = "EUA"

    def __str__(self) -> str:
        return str(self.value)
