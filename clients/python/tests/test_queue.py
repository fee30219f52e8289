"""The queue transport against a real redis-server (Debian's, on a private unix socket) and a
real worker (isolate-serve --queue-url beside ISOLATE_BIN), both started and stopped here."""

import importlib
import os
import shutil
import subprocess
import tempfile
import time
from typing import Any, Iterator

import pytest

from conftest import isolate_binary, stop
from isolate_sandbox import (JobDeadError, QueueClient, ResultTimeoutError, Sandbox,
                             SandboxConfig, SandboxUnavailableError)
from isolate_sandbox.errors import RefusedError, ServiceError
from isolate_sandbox.queue_transport import QueueTransport
from isolate_sandbox.transport import Limits, RunRequest

SERVE = os.path.join(os.path.dirname(isolate_binary()), "isolate-serve")
REDIS = shutil.which("redis-server") or "/usr/bin/redis-server"


def has_redis_module() -> bool:
    try:
        importlib.import_module("redis")
        return True
    except ImportError:
        return False


needs_queue = pytest.mark.skipif(
    os.geteuid() != 0 or not os.access(SERVE, os.X_OK) or not os.access(REDIS, os.X_OK)
    or not has_redis_module(),
    reason="needs root, isolate-serve beside the isolate binary, redis-server and python3-redis")


@pytest.fixture(scope="module")
def queue_url() -> Iterator[str]:
    """A Redis of its own (append-only file on) and one worker on it; both stopped by PID."""
    tmp = tempfile.mkdtemp(prefix="pyqueue-")
    os.chmod(tmp, 0o755)
    sock = os.path.join(tmp, "redis.sock")
    log = open(os.path.join(tmp, "log"), "w+b")
    redis = subprocess.Popen([REDIS, "--port", "0", "--unixsocket", sock, "--unixsocketperm", "600",
                              "--dir", tmp, "--appendonly", "yes", "--save", ""],
                             stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    url = "unix://" + sock
    worker = subprocess.Popen([SERVE, "--socket", os.path.join(tmp, "api.sock"), "--cli-socket",
                               "none", "--store", os.path.join(tmp, "files"), "--parallel", "2",
                               "--grace", "5s", "--queue-url", url, "--queue-name", "pytest"],
                              stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    try:
        with QueueClient(url) as client:
            for _ in range(200):
                try:
                    if client.redis.exists("isolate:worker:pytest"):
                        break
                except Exception:
                    pass
                time.sleep(0.05)
            else:
                log.seek(0)
                text = log.read().decode(errors="replace")
                pytest.fail(f"the worker did not announce itself: {text}")
        yield url
    finally:
        for proc in (worker, redis):
            stop(proc)
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


@needs_queue
def test_submit_and_result(queue_url: str) -> None:
    with QueueClient(queue_url) as client:
        job = client.submit({"commands": [{"args": ["/bin/echo", "hi"]}]})
        status, body = client.result(job, 30)
        assert status == 200 and b'"stdout":"hi\\n"' in body
        # An id that has its result is acknowledged without running again: the same answer.
        again = client.submit({"commands": [{"args": ["/bin/echo", "other"]}]}, job_id=job)
        assert again == job
        time.sleep(0.5)
        assert client.result(job, 5) == (status, body)


@needs_queue
def test_sandbox_on_the_queue(queue_url: str) -> None:
    box = Sandbox(SandboxConfig(backend="queue", queue_url=queue_url))
    assert isinstance(box.transport, QueueTransport)
    result = box.execute_code("print(6 * 7)")
    box.transport.client.close()
    assert result.success and result.stdout.strip() == "42", result.error


@needs_queue
def test_refusal_is_the_apis(queue_url: str) -> None:
    transport = QueueTransport(queue_url)
    with pytest.raises(RefusedError) as e:
        transport.run(RunRequest(command=["/bin/true"], limits=Limits(1, 64, 1024, network=True)))
    assert e.value.status == 403 and e.value.field == "commands[0].net"
    with pytest.raises(ServiceError) as bad:
        transport.run(RunRequest(command=[], limits=Limits(1, 64, 1024)))
    assert bad.value.status == 400
    transport.client.close()


@needs_queue
def test_dead_letter_without_answer(queue_url: str) -> None:
    with QueueClient(queue_url) as client:
        job = client.submit_json("{}", endpoint="files")
        with pytest.raises(JobDeadError) as e:
            client.result(job, 30)
    assert e.value.reason == 'endpoint "files" of the job: want run or exec'


@needs_queue
def test_result_timeout(queue_url: str) -> None:
    with QueueClient(queue_url) as client, pytest.raises(ResultTimeoutError):
        client.result("nobody-submitted-this", 0.3)


def test_without_the_redis_package(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.import_module

    def no_redis(name: str, *args: Any) -> Any:
        if name == "redis":
            raise ImportError(name)
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", no_redis)
    with pytest.raises(SandboxUnavailableError, match="apt install python3-redis"):
        QueueClient("redis://localhost/0")


def test_queue_config(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="queue_url"):
        SandboxConfig(backend="queue")
    monkeypatch.setenv("SANDBOX_TYPE", "queue")
    monkeypatch.setenv("ISOLATE_QUEUE_URL", "unix:///run/redis.sock")
    monkeypatch.setenv("ISOLATE_QUEUE_PREFIX", "judge")
    config = SandboxConfig.from_env()
    assert (config.backend, config.queue_url, config.queue_prefix) == (
        "queue", "unix:///run/redis.sock", "judge")
