"""Configuration from the environment (``SANDBOX_*``), overridable by arguments."""

import dataclasses
import math
import os
from typing import Any, Dict, FrozenSet, Mapping, Optional, Sequence, Tuple

from .transport import KEEP_MODES, Mount, Network, network_value

BACKENDS = ("auto", "service", "cli", "local", "queue")
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

    ``timeout`` is seconds of wall-clock (and CPU) time of the program; ``compile_timeout``
    the seconds a compiled language's compilation may add to the whole call; ``max_output_kb``
    the output kept per stream, cut as ``output_keep`` says (``head_tail``, ``head``,
    ``tail``); ``memory_mb`` the memory limit of the whole program; ``disk_mb`` the box's
    writable space and largest file (None: isolate's 64 MiB); ``mounts`` host directories bound
    into every box; ``network`` the host's network (True, where the service allows it) or an
    allowlist of what a box may reach through isolate's proxy (hosts, ``*.`` domains, addresses,
    CIDRs, each with an optional ``:PORT``; ``SANDBOX_NETWORK_ALLOW``, comma-separated);
    ``busy_wait`` the seconds a call may retry a full service (None: within the call's bound;
    0: never); ``allow_rlimit_only`` lets the binary run without root where no cgroup v2
    subtree is delegated to the caller, enforcing the limits with rlimits alone;
    ``cgroup_root`` names the delegated cgroup v2 directory the binary makes boxes under
    without root (None: the caller's own cgroup, when delegated); ``import_mode`` is
    ``block``, ``warn`` or ``off``; ``store_code`` is ``never``, ``on_error`` or ``always``;
    ``service_url`` and ``token`` reach a service over TCP; ``queue_url`` and
    ``queue_prefix`` the Redis queue its workers take jobs from (backend ``queue``).
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
    compile_timeout: float = 60.0
    disk_mb: Optional[int] = None
    mounts: Tuple[Mount, ...] = ()
    network: Network = False
    output_keep: str = "head_tail"
    busy_wait: Optional[float] = None
    service_url: Optional[str] = None
    token: Optional[str] = None
    allow_rlimit_only: bool = False
    cgroup_root: Optional[str] = None
    queue_url: Optional[str] = None
    queue_prefix: str = "isolate"

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
        positive_seconds("timeout", self.timeout)
        positive_seconds("compile_timeout", self.compile_timeout)
        if self.backend == "queue" and not self.queue_url:
            raise ValueError("the queue backend needs queue_url (ISOLATE_QUEUE_URL): "
                             "the Redis the workers take jobs from")
        if self.busy_wait is not None and not (self.busy_wait >= 0
                                               and math.isfinite(self.busy_wait)):
            raise ValueError(f"busy_wait must be a finite number of seconds >= 0, "
                             f"not {self.busy_wait!r}")
        if self.disk_mb is not None and self.disk_mb <= 0:
            raise ValueError(f"disk_mb must be positive, not {self.disk_mb!r}")
        if self.output_keep not in KEEP_MODES:
            raise ValueError(f"unknown output_keep {self.output_keep!r}; "
                             f"valid: {', '.join(KEEP_MODES)}")
        object.__setattr__(self, "mounts", tuple(parse_mounts(self.mounts)))
        if self.max_output_kb <= 0:
            raise ValueError(f"max_output_kb must be positive, not {self.max_output_kb!r}")
        if self.memory_mb <= 0:
            raise ValueError(f"memory_mb must be positive, not {self.memory_mb!r}")
        if self.cgroup_root is not None and not os.path.isabs(self.cgroup_root):
            raise ValueError(f"cgroup_root must be an absolute path, not {self.cgroup_root!r}")

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
        if env.get("ISOLATE_URL"):
            values["service_url"] = env["ISOLATE_URL"].strip()
        if env.get("ISOLATE_TOKEN"):
            values["token"] = env["ISOLATE_TOKEN"].strip()
        if env.get("ISOLATE_QUEUE_URL"):
            values["queue_url"] = env["ISOLATE_QUEUE_URL"].strip()
        if env.get("ISOLATE_QUEUE_PREFIX"):
            values["queue_prefix"] = env["ISOLATE_QUEUE_PREFIX"].strip()
        if env.get("SANDBOX_COMPILE_TIMEOUT_SEC"):
            values["compile_timeout"] = _number(env, "SANDBOX_COMPILE_TIMEOUT_SEC", float)
        if env.get("SANDBOX_DISK_MB"):
            values["disk_mb"] = _number(env, "SANDBOX_DISK_MB", int)
        if env.get("SANDBOX_MOUNTS"):
            try:
                values["mounts"] = parse_mounts(env["SANDBOX_MOUNTS"].split(","))
            except ValueError as e:
                raise ValueError(f"SANDBOX_MOUNTS: {e}") from None
        if env.get("SANDBOX_NETWORK"):
            values["network"] = _flag(env, "SANDBOX_NETWORK")
        if env.get("SANDBOX_NETWORK_ALLOW"):
            values["network"] = network_value(env["SANDBOX_NETWORK_ALLOW"], "SANDBOX_NETWORK_ALLOW")
        if env.get("SANDBOX_OUTPUT_KEEP"):
            values["output_keep"] = env["SANDBOX_OUTPUT_KEEP"].strip().lower()
        if env.get("SANDBOX_BUSY_WAIT_SEC"):
            values["busy_wait"] = _number(env, "SANDBOX_BUSY_WAIT_SEC", float)
        if env.get("SANDBOX_ALLOW_RLIMIT_ONLY"):
            values["allow_rlimit_only"] = _flag(env, "SANDBOX_ALLOW_RLIMIT_ONLY")
        if env.get("SANDBOX_CGROUP_ROOT"):
            values["cgroup_root"] = env["SANDBOX_CGROUP_ROOT"].strip()
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
        value = kind(env[name].strip())
    except ValueError:
        raise ValueError(f"{name}={env[name]!r} is not a valid {kind.__name__}") from None
    if not math.isfinite(value):
        raise ValueError(f"{name}={env[name]!r} is not a finite number")
    return value


def _flag(env: Mapping[str, str], name: str) -> bool:
    v = env[name].strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{name}={env[name]!r}: use true or false")


def positive_seconds(name: str, value: float) -> None:
    """A limit in seconds must be a finite positive number (refuses NaN and infinity)."""
    if not (isinstance(value, (int, float)) and value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a finite positive number of seconds, not {value!r}")


def parse_mounts(mounts: Any) -> Sequence[Mount]:
    """Mounts from Mount values, ``(host, box[, "ro"|"rw"])`` tuples or ``HOST:BOX[:ro|rw]``
    strings. The host path must be absolute (it is resolved by whoever binds it: the CLI as
    root, or the service with the caller's rights); the box path absolute."""
    if isinstance(mounts, (str, Mount)):
        mounts = [mounts]
    out = []
    for m in mounts or ():
        if isinstance(m, str):
            if not m.strip():
                continue
            parts = m.strip().split(":")
            if len(parts) not in (2, 3):
                raise ValueError(f"mount {m!r}: use HOST:BOX or HOST:BOX:ro|rw")
            m = tuple(parts)
        if isinstance(m, tuple):
            if len(m) not in (2, 3) or (len(m) == 3 and m[2] not in ("ro", "rw")):
                raise ValueError(f"mount {m!r}: use (host, box) or (host, box, 'ro'|'rw')")
            m = Mount(host=m[0], box=m[1], rw=len(m) == 3 and m[2] == "rw")
        if not isinstance(m, Mount):
            raise ValueError(f"mount {m!r}: use a Mount, (host, box, mode) or HOST:BOX:MODE")
        if not os.path.isabs(m.host) or not os.path.isabs(m.box):
            raise ValueError(f"mount {m}: host and box paths must be absolute")
        out.append(m)
    return out


def _import_mode(value: str) -> str:
    v = value.strip().lower()
    if v in _TRUE:
        return "block"
    if v in _FALSE:
        return "warn"
    raise ValueError(
        f"SANDBOX_BLOCK_DANGEROUS_IMPORTS={value!r}: use true (block) or false (warn)")
