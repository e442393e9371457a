"""deploy/: the systemd unit and the container image definition, and the README's backup.

An image cannot be built here (no registry but PyPI, Debian and npm), so the
Containerfile is checked for what can be checked without building: every file
it copies exists, it copies every package the wheel is built from, and the
command it runs is one `palyra` accepts. The unit is checked by systemd itself.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from palyra.cli.main import build_parser
from palyra.testing.spawn import DaemonProcess

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "deploy" / "palyra.service"
CONTAINERFILE = ROOT / "deploy" / "Containerfile"
README = (ROOT / "README.md").read_text(encoding="utf-8")


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_systemd_accepts_the_unit(tmp_path: Path) -> None:
    # Only the install prefix differs: systemd checks that ExecStart is executable.
    palyra = Path(sys.executable).parent / "palyra"
    unit = tmp_path / "palyra.service"
    unit.write_text(UNIT.read_text().replace("/opt/palyra/bin/palyra", str(palyra)))
    done = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    exec_start = re.search(r"^ExecStart=(.*)$", UNIT.read_text(), re.MULTILINE)
    assert exec_start is not None
    args = shlex.split(exec_start.group(1))
    assert args[1] == "serve" and build_parser().parse_args(args[1:]).data_dir == Path(
        "/var/lib/palyra/data")


def _instructions() -> list[tuple[str, str]]:
    lines = CONTAINERFILE.read_text().replace("\\\n", " ").splitlines()
    return [(line.split()[0], line.split(maxsplit=1)[1]) for line in lines
            if line.strip() and not line.startswith("#")]


def test_the_containerfile_copies_what_exists_and_what_the_wheel_needs() -> None:
    copied: list[str] = []
    for verb, rest in _instructions():
        if verb == "COPY" and not rest.startswith("--from"):
            *sources, _dest = rest.split()
            for source in sources:
                assert (ROOT / source).exists(), source
                copied.append(source.rstrip("/"))
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = project["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    for package in [*packages, project["project"]["readme"], "pyproject.toml"]:
        assert any(package == c or package.startswith(f"{c}/") for c in copied), package


def test_the_containerfile_runs_a_command_palyra_accepts() -> None:
    entry = next(rest for verb, rest in _instructions() if verb == "ENTRYPOINT")
    argv = eval(entry, {})  # a JSON-style list literal
    assert argv[:2] == ["palyra", "serve"]
    args = build_parser().parse_args(argv[1:])
    assert args.data_dir == Path("/var/lib/palyra/data") and args.http_host == "0.0.0.0"
    volumes = [rest for verb, rest in _instructions() if verb == "VOLUME"]
    assert volumes and "/var/lib/palyra" in volumes[0]
    assert not any(verb == "RUN" and "pip" in rest for verb, rest in _instructions()[
        [v for v, _ in _instructions()].index("FROM", 1):])  # nothing fetched in the final stage


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PALYRA_")}
    with DaemonProcess(tmp_path_factory.mktemp("backup") / "palyra-data", env=env) as proc:
        yield proc


def _sh_blocks_with(text: str) -> str:
    return next(b for b in re.findall(r"```sh\n(.*?)```", README, re.DOTALL) if text in b)


@pytest.mark.slow
def test_the_readme_backup_runs_as_written(daemon: DaemonProcess) -> None:
    key_line = next(line for line in _sh_blocks_with("KEY=$(").splitlines()
                    if line.startswith("KEY="))
    script = key_line + "\n" + _sh_blocks_with("palyra journal export --out \"backup-")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PALYRA_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script],
                          cwd=daemon.data_dir.parent, capture_output=True, text=True, env=env,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1].startswith("OK ")
    assert "neither authenticity nor completeness" not in done.stdout + done.stderr
    assert list(daemon.data_dir.parent.glob("backup-*.ndjson"))
