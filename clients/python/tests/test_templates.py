"""A template (an image built from a definition of the user's own) named by ``image=``."""

import json
import pathlib
import subprocess

import pytest

from conftest import isolate_binary, needs_root
from isolate_sandbox import SandboxRunner

TEMPLATE = {
    "name": "tpl-py-jq",
    "packages": ["jq"],
    "files": {"/usr/local/share/tpl/n.json": '{"n": 41}\n'},
    "setup": ["jq .n /usr/local/share/tpl/n.json > /usr/local/share/tpl/setup-ran"],
}


@needs_root
def test_runner_on_a_template(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    images = tmp_path / "images"
    images.mkdir()
    images.chmod(0o755)
    monkeypatch.setenv("ISOLATE_IMAGES_DIR", str(images))
    definition = tmp_path / "tpl-py-jq.json"
    definition.write_text(json.dumps(TEMPLATE))
    subprocess.run([isolate_binary(), "image", "build", "--template", str(definition)],
                   check=True, capture_output=True)
    try:
        project = tmp_path / "project"
        project.mkdir()
        (project / "in.json").write_text('{"a": 1}')
        r = SandboxRunner(backend="cli").execute(
            "jq .a+1 in.json; jq .n+1 /usr/local/share/tpl/n.json;"
            " cat /usr/local/share/tpl/setup-ran", str(project), image="tpl-py-jq")
        assert (r.exit_code, r.stdout) == (0, "2\n42\n41\n"), r.stderr
    finally:
        subprocess.run([isolate_binary(), "image", "rm", "tpl-py-jq"], check=True,
                       capture_output=True)
    assert list(images.glob("tpl-py-jq*")) == []
