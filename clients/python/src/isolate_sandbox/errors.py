"""Exceptions raised by the client."""

from typing import Optional


class SandboxError(Exception):
    """The sandbox could not run the request (bad input, a sandbox failure, a transport error)."""


class SandboxUnavailableError(SandboxError):
    """No backend can run code here: no service answers and this process cannot use the binary."""


class ServiceError(SandboxError):
    """The service refused or failed a request: ``status`` is the HTTP status (400 for bad
    input), ``field`` the JSON path of the request field at fault, if one is."""

    def __init__(self, message: str, status: int, field: Optional[str] = None) -> None:
        super().__init__(message)
        self.status = status
        self.field = field
