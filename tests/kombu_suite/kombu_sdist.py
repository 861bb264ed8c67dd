"""Kombu's own integration base classes (``t/integration/common.py``), from the sdist of the
installed Kombu, fetched at test time and cached by version; never copied into this repo.

``KOMBU_SDIST=/path/to/kombu-X.tar.gz`` uses that sdist instead of downloading one.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from types import ModuleType

#: Environment variable naming an sdist to use instead of downloading one.
OVERRIDE = "KOMBU_SDIST"
#: Where the bases live in Kombu's sdist, under its ``kombu-X/`` folder.
COMMON = "t/integration/common.py"


class SdistUnavailable(RuntimeError):
    """Kombu's sdist could not be fetched or read."""


def installed_version() -> str:
    return importlib.metadata.version("kombu")


def _download(version: str, cache: Path) -> Path:
    """``pip download`` Kombu's sdist into ``cache`` (through a folder of its own, so a
    concurrent session never reads a half-written file)."""
    sdist = cache / f"kombu-{version}.tar.gz"
    if sdist.is_file():
        return sdist
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        command = [
            sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
            f"kombu=={version}", "-d", tmp,
        ]  # fmt: skip
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=180)
        except (OSError, subprocess.SubprocessError) as exc:
            raise SdistUnavailable(f"pip download kombu=={version} failed: {exc}") from exc
        fetched = Path(tmp) / sdist.name
        if done.returncode != 0 or not fetched.is_file():
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise SdistUnavailable(
                f"pip download kombu=={version} failed ({done.returncode}): {' | '.join(tail)}"
            )
        os.replace(fetched, sdist)
    return sdist


def _extract_common(sdist: Path, target: Path) -> Path:
    """Extract only ``kombu-X/t/integration/common.py`` (``filter="data"``) to ``target``."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(sdist) as tar:
            top = next((n.split("/", 1)[0] for n in tar.getnames() if "/" in n), "")
            member = tar.getmember(f"{top}/{COMMON}")
            with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
                tar.extract(member, tmp, filter="data")
                os.replace(Path(tmp) / member.name, target)
    except (OSError, tarfile.TarError, KeyError) as exc:
        raise SdistUnavailable(f"cannot read {COMMON} from {sdist}: {exc}") from exc
    return target


def load_common(cache: Path) -> ModuleType:
    """Kombu's ``common.py`` for the installed Kombu, loaded as a private module."""
    version = installed_version()
    cache.mkdir(parents=True, exist_ok=True)
    override = os.environ.get(OVERRIDE)
    if override:
        sdist = Path(override)
        if not sdist.is_file():
            raise SdistUnavailable(f"{OVERRIDE}={override}: no such file")
        path = _extract_common(sdist, cache / "override" / COMMON)  # extracted afresh
    else:
        path = cache / f"kombu-{version}" / COMMON
        if not path.is_file():
            _extract_common(_download(version, cache), path)
        sdist = cache / f"kombu-{version}.tar.gz"
    name = f"_kombu_integration_common_{version.replace('.', '_')}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SdistUnavailable(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception:
        del sys.modules[name]
        raise
    module.__sdist__ = str(sdist)  # type: ignore[attr-defined]
    return module


#: Filled by the conftest's ``pytest_configure``: the loaded module, or why it is missing.
common: ModuleType | None = None
unavailable_reason: str = "kombu_suite/conftest.py did not run"


def prepare(cache: Path) -> None:
    """Load the bases once per session (the conftest calls this); record a failure."""
    global common, unavailable_reason
    if common is not None:
        return
    try:
        common = load_common(cache)
    except SdistUnavailable as exc:
        unavailable_reason = f"Kombu's integration bases unavailable: {exc}"
    except Exception as exc:  # common.py itself failed to import: say why, in the tests
        unavailable_reason = f"Kombu's integration bases failed to load: {exc!r}"
