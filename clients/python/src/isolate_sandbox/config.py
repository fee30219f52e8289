"""Configuration from the environment (``SANDBOX_*``), overridable by arguments."""

import dataclasses
import os
from typing import Any, Dict, FrozenSet, Mapping, Optional

BACKENDS = ("auto", "service", "cli", "local")
STORE_POLICIES = ("never", "on_error", "always")
IMPORT_MODES = ("block", "warn", "off")

DEFAULT_SOCKET = "/run/isolate/api.sock"

# Imports an AI coding loop rarely needs and a policy usually wants to see first.
# This list is policy, not protection: the sandbox is the security boundary.
DEFAULT_BLOCKED_IMPORTS: FrozenSet[str] = frozenset({
    "os", "subprocess", "shutil", "socket", "pathlib", "ctypes", "multiprocessing",
    "signal", "pty", "fcntl", "resource", "importlib", "urllib", "http", "ftplib",
    "smtplib", "telnetlib", "asyncio", "pickle", "marshal",
})

_TRUE = {"1", "true", "yes", "on", "block"}
_FALSE = {"0", "false", "no", "off", "warn"}


@dataclasses.dataclass(frozen=True)
class SandboxConfig:
    """Everything a sandbox needs to know besides the code.

    ``timeout`` is seconds of wall-clock (and CPU) time; ``max_output_kb`` the output kept per
    stream; ``memory_mb`` the memory limit of the whole program; ``import_mode`` is ``block``,
    ``warn`` or ``off``; ``store_code`` is ``never``, ``on_error`` or ``always``.
    """

    backend: str = "auto"
    timeout: float = 10.0
    max_output_kb: int = 10
    memory_mb: int = 512
    import_mode: str = "block"
    blocked_imports: FrozenSet[str] = DEFAULT_BLOCKED_IMPORTS
    store_code: str = "never"
    artifacts_dir: str = os.path.join("artifacts", "executions")
    isolate_bin: Optional[str] = None
    socket_path: str = DEFAULT_SOCKET

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(
                f"unknown sandbox type {self.backend!r}; valid: {', '.join(BACKENDS)}")
        if self.store_code not in STORE_POLICIES:
            raise ValueError(
                f"unknown store policy {self.store_code!r}; valid: {', '.join(STORE_POLICIES)}")
        if self.import_mode not in IMPORT_MODES:
            raise ValueError(
                f"unknown import mode {self.import_mode!r}; valid: {', '.join(IMPORT_MODES)}")
        if not self.timeout > 0:  # also refuses NaN
            raise ValueError(f"timeout must be a positive number of seconds, not {self.timeout!r}")
        if self.max_output_kb <= 0:
            raise ValueError(f"max_output_kb must be positive, not {self.max_output_kb!r}")
        if self.memory_mb <= 0:
            raise ValueError(f"memory_mb must be positive, not {self.memory_mb!r}")

    @classmethod
    def from_env(cls, environ: Optional[Mapping[str, str]] = None,
                 **overrides: Any) -> "SandboxConfig":
        """Read ``SANDBOX_*`` (and ``ISOLATE_BIN``, ``ISOLATE_SOCKET``); arguments win.

        A malformed value raises ValueError naming the variable.
        """
        env = os.environ if environ is None else environ
        values: Dict[str, Any] = {}
        if env.get("SANDBOX_TYPE"):
            values["backend"] = env["SANDBOX_TYPE"].strip().lower()
        if env.get("SANDBOX_TIMEOUT_SEC"):
            values["timeout"] = _number(env, "SANDBOX_TIMEOUT_SEC", float)
        if env.get("SANDBOX_MAX_OUTPUT_KB"):
            values["max_output_kb"] = _number(env, "SANDBOX_MAX_OUTPUT_KB", int)
        if env.get("SANDBOX_MEMORY_MB"):
            values["memory_mb"] = _number(env, "SANDBOX_MEMORY_MB", int)
        if env.get("SANDBOX_BLOCK_DANGEROUS_IMPORTS"):
            values["import_mode"] = _import_mode(env["SANDBOX_BLOCK_DANGEROUS_IMPORTS"])
        if env.get("SANDBOX_STORE_CODE"):
            values["store_code"] = env["SANDBOX_STORE_CODE"].strip().lower()
        if env.get("SANDBOX_ARTIFACTS_DIR"):
            values["artifacts_dir"] = env["SANDBOX_ARTIFACTS_DIR"]
        if env.get("ISOLATE_BIN"):
            values["isolate_bin"] = env["ISOLATE_BIN"]
        if env.get("ISOLATE_SOCKET"):
            values["socket_path"] = env["ISOLATE_SOCKET"]
        values.update({k: v for k, v in overrides.items() if v is not None})
        if "blocked_imports" in values:
            values["blocked_imports"] = frozenset(values["blocked_imports"])
        return cls(**values)

    @property
    def max_output_bytes(self) -> int:
        """Bytes kept per captured stream."""
        return self.max_output_kb * 1024


def _number(env: Mapping[str, str], name: str, kind: type) -> Any:
    try:
        return kind(env[name].strip())
    except ValueError:
        raise ValueError(f"{name}={env[name]!r} is not a valid {kind.__name__}") from None


def _import_mode(value: str) -> str:
    v = value.strip().lower()
    if v in _TRUE:
        return "block"
    if v in _FALSE:
        return "warn"
    raise ValueError(
        f"SANDBOX_BLOCK_DANGEROUS_IMPORTS={value!r}: use true (block) or false (warn)")
