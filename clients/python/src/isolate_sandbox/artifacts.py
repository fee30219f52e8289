"""Execution artifacts: each execution as one JSON file, named by UTC time and code hash."""

import datetime
import hashlib
import json
import os
from typing import Any, Dict, Optional

from .config import STORE_POLICIES
from .result import ExecutionResult


def should_store(policy: str, result: ExecutionResult) -> bool:
    """``always`` stores every execution, ``on_error`` those that did not succeed, ``never``
    none."""
    if policy not in STORE_POLICIES:
        raise ValueError(f"unknown store policy {policy!r}; valid: {', '.join(STORE_POLICIES)}")
    return policy == "always" or (policy == "on_error" and not result.success)


def store_execution(directory: str, code: str, language: str, limits: Dict[str, Any],
                    result: ExecutionResult, started: datetime.datetime,
                    finished: datetime.datetime) -> str:
    """Write the execution's JSON into ``directory`` (created if missing); return its path.

    The name is ``YYYYmmddTHHMMSS.ffffffZ-HASH.json``: the UTC start time, then the first 16 hex
    digits of the code's SHA-256, so files sort by time and repeated code is easy to spot.
    """
    digest = hashlib.sha256(code.encode("utf-8")).hexdigest()
    name = f"{started.strftime('%Y%m%dT%H%M%S.%fZ')}-{digest[:16]}.json"
    os.makedirs(directory, exist_ok=True)
    record = {
        "code": code,
        "code_sha256": digest,
        "language": language,
        "limits": limits,
        "started_at": started.isoformat(),
        "finished_at": finished.isoformat(),
        "result": result.to_dict(),
    }
    path = os.path.join(directory, name)
    # O_EXCL: two executions of the same code in the same microsecond must not overwrite.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=2, default=str)
        f.write("\n")
    return path


def utc_now() -> datetime.datetime:
    """The current time, timezone-aware UTC."""
    return datetime.datetime.now(datetime.timezone.utc)


def maybe_store(policy: str, directory: str, code: str, language: str, limits: Dict[str, Any],
                result: ExecutionResult, started: datetime.datetime) -> Optional[str]:
    """Store the execution if ``policy`` says so; return the file's path or None."""
    if not should_store(policy, result):
        return None
    return store_execution(directory, code, language, limits, result, started, utc_now())
