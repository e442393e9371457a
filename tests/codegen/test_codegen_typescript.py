"""The generated TypeScript type-checks under Node 20, and ships as an installable package."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from palyra.testing.spawn import DaemonProcess, clean_env

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_tsc_no_emit_passes() -> None:
    tsc = REPO_ROOT / "node_modules" / ".bin" / "tsc"
    assert tsc.exists(), "run `npm ci` first"
    proc = subprocess.run(
        [str(tsc), "--noEmit", "-p", "tsconfig.json"], cwd=REPO_ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow
def test_package_installs_into_a_scratch_project_and_runs_its_example(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """``npm pack`` the generated package, install it (with its pinned peers) into a
    project outside the repo, and run its README example under plain ``node``
    against a live daemon: a RunStream turn with one approval decided inline and
    one through ApprovalsService, then a resume from a cursor."""
    package_dir = REPO_ROOT / "generated" / "ts"
    manifest = json.loads((package_dir / "package.json").read_text())
    scratch = tmp_path_factory.mktemp("ts-scratch")
    packed = subprocess.run(
        ["npm", "pack", "--silent", "--pack-destination", str(scratch)], cwd=package_dir,
        capture_output=True, text=True, timeout=120)
    assert packed.returncode == 0, packed.stderr
    tarball = scratch / packed.stdout.strip().splitlines()[-1]
    assert tarball.is_file(), packed.stdout
    project = scratch / "project"
    project.mkdir()
    (project / "package.json").write_text(json.dumps(
        {"name": "scratch", "private": True, "type": "module"}))
    peers = [f"{name}@{version}" for name, version in manifest["peerDependencies"].items()]
    # The peers are the versions the repo's own toolchain pins, so npm's cache has them.
    installed = subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", "--prefer-offline", str(tarball), *peers],
        cwd=project, capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    example = project / "node_modules" / "@palyra" / "client" / "examples" / "turn.mjs"
    assert example.is_file()
    shutil.copy(example, project / "turn.mjs")
    env = clean_env()
    with DaemonProcess(tmp_path_factory.mktemp("ts-daemon") / "data", env=env) as daemon:
        ran = subprocess.run(
            ["node", "turn.mjs"], cwd=project, capture_output=True, text=True, timeout=120,
            env={**os.environ, "PALYRA_ADDR": f"http://127.0.0.1:{daemon.grpc_port}",
                 "PALYRA_TOKEN": daemon.token, "NODE_PATH": ""})
    assert ran.returncode == 0, ran.stdout + ran.stderr
    lines = ran.stdout.splitlines()
    assert any(line.startswith("approved inline: add") for line in lines), ran.stdout
    assert any(line.startswith("approved via ApprovalsService: add by user:node-example")
               for line in lines), ran.stdout
    done = lines[-1]
    assert done.startswith("DONE run=") and "state=DONE" in done and done.endswith("result=2")
    replayed = int(done.split("replayed=")[1].split()[0])
    assert replayed > 5, done
