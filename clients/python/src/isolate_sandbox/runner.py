"""SandboxRunner: a shell command over a fresh copy of a project, e.g. its test suite."""

import os
import stat
import time
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from .collect import CollectLimits, collect_command, unpack
from .config import SandboxConfig, parse_mounts
from .errors import CallTimeoutError, SandboxError
from .result import ExecutionResult, from_report
from .sandbox import call_timeout_report, limits_from, select_transport
from .service_transport import MAX_COPY_IN_FILES, file_kind
from .transport import OutputCallback, RunRequest, Transport

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
                image: Optional[str] = None, memory_mb: Optional[int] = None,
                max_output_kb: Optional[int] = None, disk_mb: Optional[int] = None,
                network: Any = None, mounts: Any = None,
                collect: Sequence[str] = (), collect_limits: Optional[CollectLimits] = None,
                allow_rlimit_only: Optional[bool] = None,
                on_stdout: Optional[OutputCallback] = None,
                on_stderr: Optional[OutputCallback] = None) -> ExecutionResult:
        """Copy ``project_dir`` into a fresh box, run ``command`` there; return its outcome.

        ``result.stdout``, ``result.stderr`` and ``result.exit_code`` are the command's.
        ``collect``: glob patterns (relative to the project) of files to bring back in
        ``result.files`` after the command, bounded by ``collect_limits``. Symlinks that stay
        inside the project are made in the copy; others are left out and said in
        ``result.meta.notes``. ``allow_rlimit_only`` overrides the configuration's (see
        :meth:`Sandbox.execute_code`). Raises ValueError when ``project_dir`` is not a
        directory, and SandboxError naming a FIFO, socket or device in it (nothing is created
        then).
        """
        if not os.path.isdir(project_dir):
            raise ValueError(f"project directory {project_dir!r} does not exist")
        project = os.path.abspath(project_dir)
        links, notes = project_links(project, BOX_PROJECT)
        variables: Dict[str, str] = {"PATH": "/usr/local/bin:/usr/bin:/bin"}
        for name in pass_env:
            if name in os.environ:
                variables[name] = os.environ[name]
        variables.update(env or {})
        limits = limits_from(self.config, timeout, memory_mb, max_output_kb, disk_mb, network,
                             allow_rlimit_only=allow_rlimit_only)
        bounds = collect_limits or CollectLimits()
        argv, copy_out = ["/bin/sh", "-c", command], []  # type: Tuple[List[str], List[str]]
        if collect:
            argv, copy_out = collect_command(command, collect, bounds)
        request = RunRequest(command=argv, limits=limits,
                             image=image or self.image, env=variables,
                             copy_in=[(project, BOX_PROJECT)], copy_out=copy_out,
                             cwd=BOX_PROJECT, links=links,
                             mounts=tuple(self.config.mounts) + tuple(parse_mounts(mounts)))
        clock = time.monotonic()
        try:
            outcome = self.transport.run(request, on_stdout, on_stderr)
            report, files, errors = outcome.report, outcome.files, outcome.errors
        except CallTimeoutError as e:
            report, files, errors = call_timeout_report(e, False), {}, {}
        result = from_report(report, self.transport.name, limits)
        result.duration = time.monotonic() - clock
        result.meta.notes += notes
        if collect:
            result.files, more = unpack(files, errors, bounds)
            result.meta.notes += more
        return result


def project_links(project: str, box_root: str) -> Tuple[List[Tuple[str, str]], List[str]]:
    """The project's symlinks that stay inside it, as (box path, target), and a note for each
    one left out; a FIFO, socket or device is a SandboxError naming it (found by lstat, never
    opened). Bounded like the copy itself."""
    links: List[Tuple[str, str]] = []
    notes: List[str] = []
    seen = 0
    for root, dirs, names in os.walk(project):
        for name in sorted(dirs + names):
            seen += 1
            if seen > MAX_COPY_IN_FILES:
                raise SandboxError(f"the project {project} has more than {MAX_COPY_IN_FILES} "
                                   "entries")
            full = os.path.join(root, name)
            st = os.lstat(full)
            rel = os.path.relpath(full, project)
            if stat.S_ISLNK(st.st_mode):
                target = os.readlink(full)
                inside = os.path.normpath(os.path.join(os.path.dirname(rel), target))
                if os.path.isabs(target) or inside == ".." or inside.startswith("../"):
                    notes.append(f"symlink {rel} -> {target} leads out of the project: "
                                 "not copied")
                else:
                    links.append((os.path.join(box_root, rel), target))
            elif not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
                raise SandboxError(f"cannot copy {full} into the box: "
                                   f"{file_kind(st.st_mode)}, not a regular file")
    return links, notes
