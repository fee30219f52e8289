"""Exceptions raised by the client."""


class SandboxError(Exception):
    """The sandbox could not run the request (bad input, a sandbox failure, a transport error)."""


class SandboxUnavailableError(SandboxError):
    """No backend can run code here: no service answers and this process cannot use the binary."""
