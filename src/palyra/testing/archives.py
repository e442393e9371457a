"""Unpacking the test fixtures' tarballs on every Python 3.11 the README names.

``TarFile.extractall(filter="data")`` arrived in 3.11.4; Debian 12's
``/usr/bin/python3`` is 3.11.2 and refuses the keyword. The fixtures are the
project's own, but they are unpacked the safe way on every interpreter: with
the ``data`` filter where it exists, else by refusing any member that is not a
plain file or directory inside the destination (what that filter would refuse
for these archives).
"""

from __future__ import annotations

import tarfile
from pathlib import Path


class UnsafeArchiveError(ValueError):
    """A member would land outside the destination or is not a plain file/dir."""


def _check_member(member: tarfile.TarInfo, dest: Path) -> None:
    target = (dest / member.name).resolve()
    if not (member.isfile() or member.isdir()):
        raise UnsafeArchiveError(f"{member.name}: not a plain file or directory")
    if member.name.startswith("/") or not target.is_relative_to(dest.resolve()):
        raise UnsafeArchiveError(f"{member.name}: outside {dest}")


def extract_tar(archive: Path, dest: Path) -> None:
    """Unpack ``archive`` into ``dest`` (created if missing), refusing unsafe members."""
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        members = tar.getmembers()
        for member in members:
            _check_member(member, dest)
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, members=members, filter="data")
        else:  # Python < 3.11.4: every member was checked above.
            tar.extractall(dest, members=members)
