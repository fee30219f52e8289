"""Execution artifacts under SANDBOX_STORE_CODE, through the real binary, as root."""

import json
import pathlib
import re
from typing import List

import pytest

from conftest import needs_root
from isolate_sandbox import execute_code
from isolate_sandbox.artifacts import should_store

pytestmark = needs_root


def stored(tmp_path: pathlib.Path) -> List[pathlib.Path]:
    d = tmp_path / "artifacts"
    return sorted(d.iterdir()) if d.exists() else []


def test_never(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOX_STORE_CODE", "never")
    assert execute_code("raise SystemExit(1)").meta.artifact is None
    assert stored(tmp_path) == []


def test_on_error(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOX_STORE_CODE", "on_error")
    assert execute_code("print('fine')").meta.artifact is None
    failed = execute_code("raise SystemExit(1)")
    files = stored(tmp_path)
    assert [str(f) for f in files] == [failed.meta.artifact]
    record = json.loads(files[0].read_text())
    assert record["code"] == "raise SystemExit(1)" and record["language"] == "python"
    assert record["result"]["status"] == "RE" and record["result"]["exit_code"] == 1
    assert record["limits"] == {"timeout": 10.0, "memory_mb": 512, "max_output_kb": 10,
                                "disk_mb": None, "network": False, "output_keep": "head_tail"}
    assert record["started_at"] <= record["finished_at"]
    assert re.fullmatch(r"\d{8}T\d{6}\.\d{6}Z-[0-9a-f]{16}\.json", files[0].name)
    assert files[0].name.endswith(record["code_sha256"][:16] + ".json")
    blocked = execute_code("import os")
    assert blocked.meta.artifact is not None and len(stored(tmp_path)) == 2


def test_always(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOX_STORE_CODE", "always")
    monkeypatch.setenv("SANDBOX_ARTIFACTS_DIR", str(tmp_path / "elsewhere"))
    execute_code("print(1)")
    execute_code("print(1)")
    files = sorted((tmp_path / "elsewhere").iterdir())
    assert len(files) == 2 and files[0].name.split("-")[1] == files[1].name.split("-")[1]


def test_unknown_policy() -> None:
    with pytest.raises(ValueError, match="unknown store policy 'maybe'"):
        should_store("maybe", None)  # type: ignore[arg-type]
