"""The queue transport: jobs on a Redis stream that ``isolate-serve --queue-url`` workers take
(docs/QUEUE.md). Needs Debian's ``python3-redis`` (the only part of the client that does).

A job is the body of ``POST /v1/run`` or ``/v1/exec`` under an id; its result is exactly that
endpoint's answer (status and body), kept under ``PREFIX:result:ID`` and announced on
``PREFIX:results``. :class:`QueueClient` submits and waits; :class:`QueueTransport` runs a
sandbox's requests through it.
"""

import http
import importlib
import json
import time
import uuid
from typing import Any, Dict, Optional, Sequence, Tuple

from .errors import CallTimeoutError, SandboxError, SandboxUnavailableError
from .service_transport import ServiceTransport, error_of
from .transport import Limits, Mount, TextSink

# The longest a single blocking read of the results stream waits, in milliseconds: the wait
# is re-checked against the caller's deadline between reads.
READ_BLOCK_MS = 1000


class JobDeadError(SandboxError):
    """The job went to the dead letters without an answer (``reason`` says why: malformed, or
    delivered too often without a result)."""

    def __init__(self, job_id: str, reason: str) -> None:
        super().__init__(f"isolate queue: job {job_id}: dead letter: {reason}")
        self.job_id = job_id
        self.reason = reason


class ResultTimeoutError(SandboxError):
    """No result within the wait; the job may still run (nothing cancels a queued job)."""

    def __init__(self, job_id: str, seconds: float) -> None:
        super().__init__(f"isolate queue: job {job_id}: no result within {seconds:g}s")
        self.job_id = job_id
        self.seconds = seconds


def redis_module() -> Any:
    """The redis package, or one error saying how to get it."""
    try:
        return importlib.import_module("redis")
    except ImportError:
        raise SandboxUnavailableError(
            "the queue transport needs the redis package (Debian: apt install python3-redis)"
        ) from None


class QueueClient:
    """Submits jobs to ``PREFIX:jobs`` and reads their results; ``url`` is a Redis URL
    (``redis://``, ``rediss://``, ``unix://``)."""

    def __init__(self, url: str, prefix: str = "isolate") -> None:
        self.redis = redis_module().Redis.from_url(url)
        self.prefix = prefix

    def close(self) -> None:
        """Close the client's connections to Redis."""
        self.redis.close()
        self.redis.connection_pool.disconnect()

    def __enter__(self) -> "QueueClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def submit(self, body: Dict[str, Any], endpoint: str = "run",
               job_id: Optional[str] = None) -> str:
        """Queue one request (the JSON body of ``/v1/run`` or ``/v1/exec``); its job id (a
        fresh one unless given: an id that already has a result is not run again)."""
        return self.submit_json(json.dumps(body), endpoint, job_id)

    def submit_json(self, body: str, endpoint: str = "run", job_id: Optional[str] = None) -> str:
        job_id = job_id or uuid.uuid4().hex
        self.redis.xadd(f"{self.prefix}:jobs", {"id": job_id, "endpoint": endpoint, "body": body})
        return job_id

    def result(self, job_id: str, timeout: float) -> Tuple[int, bytes]:
        """Wait at most ``timeout`` seconds for the job's answer: its HTTP status and body.
        Raises JobDeadError for a job dead-lettered without an answer, ResultTimeoutError."""
        deadline = time.monotonic() + timeout
        results = f"{self.prefix}:results"
        # The announcements after this point: read before the result, so that none is missed
        # between looking and waiting.
        last = self.redis.xrevrange(results, count=1)
        since = last[0][0] if last else b"0-0"
        while True:
            found = self.redis.hgetall(f"{self.prefix}:result:{job_id}")
            if found:
                return self._answer(job_id, found)
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ResultTimeoutError(job_id, timeout)
                block = max(1, min(READ_BLOCK_MS, int(left * 1000)))
                entries = self.redis.xread({results: since}, block=block, count=1000)
                announced = False
                for _, messages in entries or []:
                    for message_id, fields in messages:
                        since = message_id
                        announced = announced or fields.get(b"id") == job_id.encode()
                if announced:
                    break

    @staticmethod
    def _answer(job_id: str, found: Dict[bytes, bytes]) -> Tuple[int, bytes]:
        status = found.get(b"status", b"").decode()
        if not status:
            raise JobDeadError(job_id, found.get(b"dead_letter", b"").decode())
        return int(status), found.get(b"body", b"")


class QueueTransport(ServiceTransport):
    """Runs a sandbox's requests as queue jobs: what the service transport sends, through
    Redis, and the answer the same (``400``, ``403`` and all). A call that times out leaves
    its job queued or running: nothing cancels it."""

    name = "queue"
    stores_files = False  # a job's files travel in the job: the workers' store is not ours

    def __init__(self, url: str, prefix: str = "isolate") -> None:
        self.client = QueueClient(url, prefix)
        self.endpoint = url
        self.token = None
        self.busy_wait = 0.0  # workers wait for free slots themselves: never a 429

    def _post_once(self, path: str, data: str, limits: Limits, deadline: float, left: float,
                   sinks: Tuple[TextSink, TextSink], mounts: Sequence[Mount]
                   ) -> Tuple[Dict[str, Any], Tuple[TextSink, TextSink]]:
        try:
            job_id = self.client.submit_json(data, path.rsplit("/", 1)[-1])
            status, body = self.client.result(job_id, left)
        except ResultTimeoutError:
            raise CallTimeoutError(limits.call_timeout) from None
        except redis_module().RedisError as e:
            raise SandboxError(f"isolate queue: {e}") from None
        if status != 200:
            raise error_of(status, http.HTTPStatus(status).phrase, body, None, mounts)
        answer: Dict[str, Any] = json.loads(body)
        # The whole answer at once (no stream): its output goes through the sinks as a
        # stream's would, so that the caller's callbacks and head-and-tail cut still apply.
        report = (answer.get("results") or [{}])[0] if "results" in answer else answer.get("run")
        for sink, stream in zip(sinks, ("stdout", "stderr")):
            if report and report.get(stream):
                sink.emit(report[stream])
            sink.close()
        return answer, sinks
