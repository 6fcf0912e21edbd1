"""Pack installed distributions back into wheels, for scripts/gpu-smoke-bundle.sh where pip cannot download them.

A wheel is a zip of the files a distribution installs into site-packages plus its .dist-info
(the binary distribution format, PEP 427). The files pip recorded in RECORD when it installed
the distribution are zipped under the name its WHEEL file's tags give, with a fresh RECORD of
sha256 hashes, so the result installs where the original did: any Python for a pure one, the
same CPython version and platform for a compiled one (PyYAML). Byte-code and the installer's
own files (INSTALLER, REQUESTED, direct_url.json) are left out; files installed outside
site-packages (console scripts) are left out and named, since an import does not need them.

    python3 scripts/wheel_from_installed.py DEST NAME [NAME ...]

Exit status 1 when a NAME is not installed in this Python.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import sys
import zipfile
from pathlib import Path

INSTALLER_FILES = {"INSTALLER", "REQUESTED", "RECORD", "direct_url.json"}


def wheel_tag(wheel_file: str) -> str:
    """``py3-none-any`` or ``cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64`` from WHEEL's Tag lines."""
    parts: list[list[str]] = [[], [], []]
    for line in wheel_file.splitlines():
        if line.startswith("Tag:"):
            for seen, part in zip(parts, line.split(":", 1)[1].strip().split("-")):
                if part not in seen:
                    seen.append(part)
    return "-".join(".".join(sorted(seen)) for seen in parts)


def pack(name: str, dest: Path) -> Path:
    """Write the wheel of installed distribution ``name`` into ``dest``; return its path.

    Raises:
        importlib.metadata.PackageNotFoundError: ``name`` is not installed here.
    """
    dist = importlib.metadata.distribution(name)
    files = [f for f in dist.files or () if "__pycache__" not in f.parts and f.suffix != ".pyc"]
    info = next(f.parts[0] for f in files if f.parts[0].endswith(".dist-info"))
    outside = [str(f) for f in files if f.parts[0] == ".."]
    if outside:
        print(f"{name}: left out what it installed outside site-packages: {', '.join(outside)}", file=sys.stderr)
    kept = [f for f in files if f.parts[0] != ".." and not (f.parts[0] == info and f.name in INSTALLER_FILES)]
    wheel = dest / f"{info[:-len('.dist-info')]}-{wheel_tag(dist.read_text('WHEEL') or '')}.whl"
    record = []
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for file in kept:
            data = Path(dist.locate_file(file)).read_bytes()
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            archive.writestr(file.as_posix(), data)
            record.append(f"{file.as_posix()},sha256={digest},{len(data)}")
        record.append(f"{info}/RECORD,,")
        archive.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return wheel


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: python3 scripts/wheel_from_installed.py DEST NAME [NAME ...]", file=sys.stderr)
        return 2
    dest = Path(argv[0])
    dest.mkdir(parents=True, exist_ok=True)
    status = 0
    for name in argv[1:]:
        try:
            print(f"packed the installed {name}: {pack(name, dest).name}")
        except importlib.metadata.PackageNotFoundError:
            print(f"{name} is not installed in {sys.executable}: nothing to pack", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
