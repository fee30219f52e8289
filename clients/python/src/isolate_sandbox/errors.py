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
        # Seconds the service asked to wait before retrying (429), if it said.
        self.retry_after: Optional[float] = None


class RefusedError(ServiceError):
    """The service's caller policy refused what the request asks (HTTP 403): ``field`` names
    the request field (``net``, a mount), the message the rule."""


class CallTimeoutError(SandboxError):
    """The whole call (queueing, compiling, running, copying) took longer than its bound; the
    box was stopped."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"the call did not finish within {seconds:g}s; stopped")
        self.seconds = seconds
