"""``palyra skills install URL``: a skill published as one archive file.

The archive (``.tar.gz``/``.tgz`` or ``.zip``, at most ``MAX_ARCHIVE_BYTES``) is
downloaded, and only its regular files with plain relative names are unpacked
(no links, devices, absolute paths or ``..``) into a temporary directory; the
skill directory is the one holding ``skill.json`` (the top level, or the one
directory the archive wraps it in). The caller then installs from there with
every check a directory install gets (manifest, SHA-256, signature).
"""

from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path, PurePosixPath

import httpx

from palyra.tools.skills.manifest import ManifestError

MAX_ARCHIVE_BYTES = 16 * 1024 * 1024
MAX_FILES = 64


def _safe(name: str) -> PurePosixPath:
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        raise ManifestError(f"archive member {name!r} is not a plain relative path")
    return path


def download(url: str, *, timeout_s: float = 30.0) -> bytes:
    """The archive's bytes, refused past ``MAX_ARCHIVE_BYTES``.

    Raises:
        ManifestError: Not http(s), an HTTP error, or too large.
    """
    if not url.startswith(("https://", "http://")):
        raise ManifestError(f"{url!r} is not an http(s) URL")
    data = bytearray()
    try:
        with httpx.stream("GET", url, timeout=timeout_s, follow_redirects=True) as response:
            response.raise_for_status()
            for chunk in response.iter_bytes():
                data += chunk
                if len(data) > MAX_ARCHIVE_BYTES:
                    raise ManifestError(f"{url} is over {MAX_ARCHIVE_BYTES} bytes")
    except httpx.HTTPError as exc:
        raise ManifestError(f"cannot download {url}: {exc}") from exc
    return bytes(data)


def unpack(name: str, data: bytes, into: Path) -> Path:
    """Unpack ``data`` (named ``name``, for its kind) into ``into``; returns the
    directory holding ``skill.json``.

    Raises:
        ManifestError: An unknown kind, an unsafe member, too many files, or no
            ``skill.json``.
    """
    members: list[tuple[PurePosixPath, bytes]] = []
    if name.endswith((".tar.gz", ".tgz")):
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
            for info in archive.getmembers():
                if info.isdir():
                    continue
                if not info.isfile():
                    raise ManifestError(f"archive member {info.name!r} is not a regular file")
                handle = archive.extractfile(info)
                assert handle is not None
                members.append((_safe(info.name), handle.read()))
    elif name.endswith(".zip"):
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for entry in archive.infolist():
                if not entry.is_dir():
                    members.append((_safe(entry.filename), archive.read(entry)))
    else:
        raise ManifestError(f"{name}: a skill archive is a .tar.gz, .tgz or .zip")
    if len(members) > MAX_FILES:
        raise ManifestError(f"the archive holds over {MAX_FILES} files")
    manifests = [path for path, _ in members if path.name == "skill.json"]
    if len(manifests) != 1 or len(manifests[0].parts) > 2:
        raise ManifestError("the archive must hold one skill.json, at its top or in one folder")
    for path, body in members:
        target = into.joinpath(*path.parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(body)
    return into.joinpath(*manifests[0].parent.parts)
