"""Configuration from SANDBOX_* and arguments (no root needed)."""

from typing import Dict

import pytest

from isolate_sandbox import SandboxConfig, get_sandbox
from isolate_sandbox.config import DEFAULT_BLOCKED_IMPORTS


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
