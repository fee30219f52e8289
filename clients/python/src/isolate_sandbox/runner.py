"""SandboxRunner: a shell command over a fresh copy of a project, e.g. its test suite."""

import os
import time
from typing import Any, Dict, Iterable, Mapping, Optional

from .config import SandboxConfig
from .result import ExecutionResult, from_report
from .sandbox import select_transport
from .transport import Limits, OutputCallback, RunRequest, Transport

# Where the project appears in the box: inside the writable /box, so tests may write beside it.
BOX_PROJECT = "/box/project"


class SandboxRunner:
    """Runs ``sh -c COMMAND`` in a fresh box holding a copy of a project directory.

    The box sees the copy at ``/box/project`` (its working directory, writable; the original
    is never touched), the image's tools (``host``: the host's /usr read-only, so the host's
    pytest; or a language's image), an environment of ``PATH`` and the variables the caller
    names (``env`` values, ``pass_env`` names taken from the caller's environment), nothing else.
    """

    def __init__(self, config: Optional[SandboxConfig] = None, image: str = "host",
                 transport: Optional[Transport] = None, **overrides: Any) -> None:
        self.config = config or SandboxConfig.from_env(**overrides)
        self.image = image
        self.transport = transport if transport is not None else select_transport(self.config)

    def execute(self, command: str, project_dir: str, *, env: Optional[Mapping[str, str]] = None,
                pass_env: Iterable[str] = (), timeout: Optional[float] = None,
                on_stdout: Optional[OutputCallback] = None,
                on_stderr: Optional[OutputCallback] = None) -> ExecutionResult:
        """Copy ``project_dir`` into a fresh box, run ``command`` there; return its outcome.

        ``result.stdout``, ``result.stderr`` and ``result.exit_code`` are the command's.
        Raises ValueError when ``project_dir`` is not a directory (nothing is created then).
        """
        if not os.path.isdir(project_dir):
            raise ValueError(f"project directory {project_dir!r} does not exist")
        variables: Dict[str, str] = {"PATH": "/usr/local/bin:/usr/bin:/bin"}
        for name in pass_env:
            if name in os.environ:
                variables[name] = os.environ[name]
        variables.update(env or {})
        seconds = self.config.timeout if timeout is None else float(timeout)
        limits = Limits(timeout=seconds, memory_mb=self.config.memory_mb,
                        max_output_bytes=self.config.max_output_bytes)
        request = RunRequest(command=["/bin/sh", "-c", command], limits=limits,
                             image=self.image, env=variables,
                             copy_in=[(os.path.abspath(project_dir), BOX_PROJECT)],
                             cwd=BOX_PROJECT)
        clock = time.monotonic()
        outcome = self.transport.run(request, on_stdout, on_stderr)
        result = from_report(outcome.report, self.transport.name, seconds,
                             limits.memory_mb, self.config.max_output_kb)
        result.duration = time.monotonic() - clock
        return result
