"""A PEP 517 build backend of the standard library only, for this one package.

``pip install ./clients/python`` then needs neither setuptools nor wheel (a fresh machine's
Python may have neither, and no index to fetch them from), and writes nothing into the checkout:
the wheel is assembled in memory from ``src/isolate_sandbox`` and written only to the directory
pip names (its own temporary one), so a root-owned checkout installs for any user.
"""

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile
from typing import Any, Dict, List, Optional

NAME = "isolate_sandbox"
DIST = "isolate-sandbox"
HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "src", NAME, "__init__.py"), encoding="utf-8") as _init:
    VERSION = re.search(r'^__version__ = "([^"]+)"', _init.read(), re.M).group(1)  # type: ignore
TAG = "py3-none-any"


def metadata() -> str:
    """The core metadata (METADATA / PKG-INFO)."""
    with open(os.path.join(HERE, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    return (f"Metadata-Version: 2.1\nName: {DIST}\nVersion: {VERSION}\n"
            "Summary: Python client for the isolate Linux sandbox: execute_code, "
            "SandboxRunner, SandboxExecutor\nRequires-Python: >=3.9\n"
            f"Description-Content-Type: text/markdown\n\n{readme}")


def package_files() -> Dict[str, bytes]:
    """The package's files (``*.py`` and ``py.typed``) by their path in the wheel."""
    src = os.path.join(HERE, "src", NAME)
    files = {}
    for name in sorted(os.listdir(src)):
        if name.endswith(".py") or name == "py.typed":
            with open(os.path.join(src, name), "rb") as f:
                files[f"{NAME}/{name}"] = f.read()
    return files


def dist_info(files: Dict[str, bytes]) -> Dict[str, bytes]:
    """The wheel's .dist-info files, RECORD last (it lists every other file's hash)."""
    info = f"{NAME}-{VERSION}.dist-info"
    extra = {f"{info}/METADATA": metadata().encode(),
             f"{info}/WHEEL": (f"Wheel-Version: 1.0\nGenerator: stdlib_backend\n"
                               f"Root-Is-Purelib: true\nTag: {TAG}\n").encode()}
    lines = []
    for path, data in list(files.items()) + list(extra.items()):
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
        lines.append(f"{path},sha256={digest.decode()},{len(data)}")
    lines.append(f"{info}/RECORD,,")
    extra[f"{info}/RECORD"] = ("\n".join(lines) + "\n").encode()
    return extra


def get_requires_for_build_wheel(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    """Nothing beyond the standard library."""
    return []


get_requires_for_build_sdist = get_requires_for_build_wheel
get_requires_for_build_editable = get_requires_for_build_wheel


def prepare_metadata_for_build_wheel(metadata_directory: str,
                                     config_settings: Optional[Dict[str, Any]] = None) -> str:
    """The .dist-info directory in ``metadata_directory``."""
    info = f"{NAME}-{VERSION}.dist-info"
    for path, data in dist_info({}).items():
        if path.endswith("/RECORD"):
            continue
        target = os.path.join(metadata_directory, path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as f:
            f.write(data)
    return info


def build_wheel(wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None,
                metadata_directory: Optional[str] = None) -> str:
    """The wheel, written to ``wheel_directory`` only."""
    name = f"{NAME}-{VERSION}-{TAG}.whl"
    files = package_files()
    files.update(dist_info(files))
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w",
                         zipfile.ZIP_DEFLATED) as whl:
        for path, data in files.items():
            whl.writestr(zipfile.ZipInfo(path, (1980, 1, 1, 0, 0, 0)), data)
    return name


def build_sdist(sdist_directory: str, config_settings: Optional[Dict[str, Any]] = None) -> str:
    """The source archive, written to ``sdist_directory`` only."""
    base = f"{NAME}-{VERSION}"
    name = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as tar:
        for rel in ["pyproject.toml", "setup.cfg", "README.md", "stdlib_backend.py"] + \
                [f"src/{p}" for p in package_files()]:
            tar.add(os.path.join(HERE, rel), arcname=f"{base}/{rel}")
        data = metadata().encode()
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return name
