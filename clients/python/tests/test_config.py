"""Configuration from SANDBOX_* and arguments, and what follows from it (no root needed)."""

from typing import Dict

import pytest

from isolate_sandbox import SandboxConfig, get_sandbox
from isolate_sandbox.cli_transport import limit_flags
from isolate_sandbox.config import DEFAULT_BLOCKED_IMPORTS
from isolate_sandbox.result import from_report
from isolate_sandbox.sandbox import limits_from
from isolate_sandbox.transport import Limits


def test_defaults() -> None:
    cfg = SandboxConfig.from_env({})
    assert cfg.backend == "auto"
    assert cfg.max_output_kb == 10
    assert cfg.max_output_bytes == 10240
    assert cfg.store_code == "never"
    assert cfg.import_mode == "block"
    assert cfg.blocked_imports == DEFAULT_BLOCKED_IMPORTS


def test_environment_read() -> None:
    cfg = SandboxConfig.from_env({
        "SANDBOX_TYPE": " Local ", "SANDBOX_TIMEOUT_SEC": "2.5", "SANDBOX_MAX_OUTPUT_KB": "3",
        "SANDBOX_MEMORY_MB": "128", "SANDBOX_BLOCK_DANGEROUS_IMPORTS": "false",
        "SANDBOX_STORE_CODE": "on_error", "SANDBOX_ARTIFACTS_DIR": "/x",
        "ISOLATE_BIN": "/bin/isolate", "ISOLATE_SOCKET": "/s.sock"})
    assert (cfg.backend, cfg.timeout, cfg.max_output_kb, cfg.memory_mb) == ("local", 2.5, 3, 128)
    assert (cfg.import_mode, cfg.store_code, cfg.artifacts_dir) == ("warn", "on_error", "/x")
    assert (cfg.isolate_bin, cfg.socket_path) == ("/bin/isolate", "/s.sock")
    assert SandboxConfig.from_env({"SANDBOX_BLOCK_DANGEROUS_IMPORTS": "1"}).import_mode == "block"


def test_without_root_options() -> None:
    cfg = SandboxConfig.from_env({"SANDBOX_ALLOW_RLIMIT_ONLY": "yes",
                                  "SANDBOX_CGROUP_ROOT": " /sys/fs/cgroup/user.slice/x "})
    assert (cfg.allow_rlimit_only, cfg.cgroup_root) == (True, "/sys/fs/cgroup/user.slice/x")
    assert SandboxConfig.from_env({}).allow_rlimit_only is False
    limits = limits_from(cfg, None, None, None)
    assert limits.allow_rlimit_only and "--allow-rlimit-only" in limit_flags(limits)
    limits = limits_from(cfg, None, None, None, allow_rlimit_only=False)
    assert not limits.allow_rlimit_only and "--allow-rlimit-only" not in limit_flags(limits)


def test_enforcement_read_from_the_report() -> None:
    how = {"memory": "cgroup", "pids": "cgroup", "cpu": "cgroup", "cpus": "none",
           "wall": "supervisor"}
    limits = Limits(timeout=1, memory_mb=64, max_output_bytes=1024)
    run = {"status": "OK", "exit_code": 0, "memory_peak": 0,
           "sandbox": {"cgroup": "none", "limits": how}}
    assert from_report({"status": "OK", "compile": None, "run": run}, "cli",
                       limits).meta.enforcement == how
    assert from_report(dict(run, sandbox={"cgroup": "box-1"}), "cli",
                       limits).meta.enforcement == {}


def test_arguments_win() -> None:
    cfg = SandboxConfig.from_env({"SANDBOX_TIMEOUT_SEC": "5"}, timeout=7, max_output_kb=None,
                                 blocked_imports=["a"])
    assert cfg.timeout == 7
    assert cfg.max_output_kb == 10
    assert cfg.blocked_imports == frozenset({"a"})


@pytest.mark.parametrize("env, message", [
    ({"SANDBOX_TYPE": "docker"}, "unknown sandbox type 'docker'; valid: auto, service, cli, local"),
    ({"SANDBOX_TIMEOUT_SEC": "ten"}, "SANDBOX_TIMEOUT_SEC='ten' is not a valid float"),
    ({"SANDBOX_TIMEOUT_SEC": "nan"}, "SANDBOX_TIMEOUT_SEC='nan' is not a finite number"),
    ({"SANDBOX_TIMEOUT_SEC": "-1"}, "timeout must be a finite positive number of seconds"),
    ({"SANDBOX_MAX_OUTPUT_KB": "1.5"}, "SANDBOX_MAX_OUTPUT_KB='1.5' is not a valid int"),
    ({"SANDBOX_MAX_OUTPUT_KB": "0"}, "max_output_kb must be positive"),
    ({"SANDBOX_MEMORY_MB": "0"}, "memory_mb must be positive"),
    ({"SANDBOX_STORE_CODE": "sometimes"}, "unknown store policy 'sometimes'"),
    ({"SANDBOX_BLOCK_DANGEROUS_IMPORTS": "maybe"}, "SANDBOX_BLOCK_DANGEROUS_IMPORTS='maybe'"),
    ({"SANDBOX_ALLOW_RLIMIT_ONLY": "maybe"}, "SANDBOX_ALLOW_RLIMIT_ONLY='maybe': use true or"),
    ({"SANDBOX_CGROUP_ROOT": "user.slice"}, "cgroup_root must be an absolute path, not 'user"),
])
def test_bad_values(env: Dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        SandboxConfig.from_env(env)


def test_bad_import_mode_argument() -> None:
    with pytest.raises(ValueError, match="unknown import mode 'never'"):
        SandboxConfig(import_mode="never")


def test_get_sandbox_unknown_kind() -> None:
    with pytest.raises(ValueError, match="valid: auto, service, cli, local"):
        get_sandbox("firecracker")


def test_get_sandbox_local_warns() -> None:
    with pytest.warns(RuntimeWarning, match="isolates nothing"):
        box = get_sandbox("local")
    assert box.runtime == "local"
