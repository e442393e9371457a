#!/usr/bin/env python3
"""Install the Debian packages the test suite needs, listed in tools/system-packages.txt.

The project's own files must install everything a fresh machine lacks (CI runs
on a clean clone). Packages already present cost one ``dpkg-query`` call; missing
ones are installed with ``apt-get`` when running as root, otherwise the exact
command to run is printed and the script exits non-zero.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

LIST = Path(__file__).with_name("system-packages.txt")


def wanted() -> list[str]:
    names = []
    for line in LIST.read_text().splitlines():
        name = line.split("#", 1)[0].strip()
        if name:
            names.append(name)
    return names


def missing(names: list[str]) -> list[str]:
    if not names or shutil.which("dpkg-query") is None:
        return []
    out = subprocess.run(
        ["dpkg-query", "-W", "-f=${Package} ${db:Status-Status}\n", *names],
        capture_output=True, text=True, check=False,
    ).stdout
    installed = {p for p, _, s in (ln.partition(" ") for ln in out.splitlines()) if s == "installed"}
    return [n for n in names if n not in installed]


def main() -> int:
    todo = missing(wanted())
    if not todo:
        return 0
    command = ["apt-get", "install", "-y", "--no-install-recommends", *todo]
    if os.geteuid() != 0:
        print("tools/ensure_system_packages.py: missing Debian packages; run as root:\n"
              f"  apt-get update && {' '.join(command)}", file=sys.stderr)
        return 1
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    print(f"tools/ensure_system_packages.py: installing {' '.join(todo)}", file=sys.stderr)
    subprocess.run(["apt-get", "update", "-q"], check=True, env=env)
    subprocess.run(command, check=True, env=env)
    return 0


if __name__ == "__main__":
    sys.exit(main())
