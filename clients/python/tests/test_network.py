"""A box's network by policy from Python: an allowlist on every transport and in a Session,
against an HTTP server on the host's loopback (the box reaches it through isolate's proxy),
and the configuration's SANDBOX_NETWORK_ALLOW. Real binary and real service, as root."""

import http.server
import threading
from typing import Iterator

import pytest

from conftest import needs_root
from isolate_sandbox import Sandbox, SandboxConfig, Session
from isolate_sandbox.cli_transport import limit_flags
from isolate_sandbox.service_transport import limit_fields
from isolate_sandbox.transport import Limits, network_value
from test_service import needs_service, service  # noqa: F401

FETCH = """
import urllib.request
try:
    print(urllib.request.urlopen("http://127.0.0.1:%d/hello", timeout=10).read().decode())
except Exception as e:
    print("refused:", e)
"""


class Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the server's name for it
        body = b"hello from the host"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def host_server() -> Iterator[int]:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


def test_network_values_and_fields() -> None:
    assert network_value(["a.org", "10.0.0.0/8:443"]) == ("a.org", "10.0.0.0/8:443")
    assert network_value("a.org, *.b.org") == ("a.org", "*.b.org")
    assert network_value(True) is True
    for bad in ([], "", [1], None):
        with pytest.raises(ValueError, match="network"):
            network_value(bad)
    lim = Limits(1, 64, 1024, network=("a.org", "!a.org:25"))
    assert limit_fields(lim)["network"] == {"allow": ["a.org"], "deny": ["a.org:25"]}
    assert limit_fields(lim)["net"] == "allow"
    assert "allow:a.org,!a.org:25" in limit_flags(lim)


def test_config_reads_the_allowlist(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOX_NETWORK_ALLOW", "pypi.org:443,*.pythonhosted.org:443")
    assert SandboxConfig.from_env().network == ("pypi.org:443", "*.pythonhosted.org:443")


@needs_root
@needs_service
@pytest.mark.parametrize("backend", ["cli", "service"])
def test_allowlist_reaches_what_it_names(backend: str, service: str,  # noqa: F811
                                         host_server: int) -> None:
    # (The import guard would stop urllib before the box does.)
    sb = Sandbox(SandboxConfig(backend=backend, socket_path=service, import_mode="off"))
    r = sb.execute_code(FETCH % host_server, network=[f"127.0.0.1:{host_server}"])
    assert r.status == "OK" and r.stdout == "hello from the host\n", (r.status, r.stdout, r.stderr)
    r = sb.execute_code(FETCH % host_server, network=["pypi.org:443"])
    assert r.stdout.startswith("refused:") and "403" in r.stdout, r.stdout
    r = sb.execute_code(FETCH % host_server)
    assert r.stdout.startswith("refused:"), r.stdout


@needs_root
@needs_service
def test_session_keeps_its_allowlist(service: str, host_server: int) -> None:  # noqa: F811
    with Session(socket_path=service, network=[f"127.0.0.1:{host_server}"]) as sb:
        for _ in range(2):
            out = sb.commands.run(["python3", "-c", FETCH % host_server])
            assert out.stdout == "hello from the host\n", (out.stdout, out.stderr)
