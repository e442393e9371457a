"""The generator refuses inconsistent specs, naming the offending element."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from codegen.__main__ import main

REPO_ROOT = Path(__file__).resolve().parents[2]


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_unreachable_state_fails_via_the_real_command(
    spec_copy: Callable[[str | None], Path], tmp_path: Path
) -> None:
    # The acceptance case from the issue, through `python -m codegen` itself.
    spec = spec_copy("unreachable_state")
    proc = subprocess.run(
        [sys.executable, "-m", "codegen", "--spec", str(spec), "--out", str(tmp_path / "out")],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert (
        "spec/lifecycle/run.yaml: state 'limbo' is unreachable from initial state 'pending'"
        in proc.stderr
    )
    assert not (tmp_path / "out").exists(), "a failed run must not write output"


@pytest.mark.parametrize(
    ("overlay", "expected"),
    [
        ("trap_state", "state 'waiting_for_approval' is not final and has no way out (trap state)"),
        (
            "final_with_outgoing",
            "final state 'done' has an outgoing transition --reopen--> 'in_progress'",
        ),
        (
            "state_without_enum_value",
            "spec/lifecycle/run.yaml: state 'paused' has no value RUN_STATE_PAUSED in enum palyra.v1.RunState",
        ),
        (
            "enum_value_without_state",
            "spec/proto/palyra/v1/common.proto: enum value RUN_STATE_WAITING_FOR_APPROVAL "
            "of palyra.v1.RunState has no state in spec/lifecycle/run.yaml",
        ),
        (
            "rpc_without_http",
            "spec/proto/palyra/v1/fixture_unmapped.proto: rpc palyra.v1.FixtureService.Ping "
            "has no HTTP mapping",
        ),
        (
            "guarded_transition",
            "transition 'pending' --approve--> 'approved' has unsupported keys ['cond']",
        ),
    ],
)
def test_broken_fixture_fails_with_named_element(
    overlay: str,
    expected: str,
    spec_copy: Callable[[str | None], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, output = run_cli(
        ["--spec", str(spec_copy(overlay)), "--out", str(tmp_path / "out")], capsys
    )
    assert code == 1
    assert expected in output


def test_error_code_without_mapping_fails(
    spec_copy: Callable[[str | None], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = spec_copy(None)
    errors = spec / "proto" / "palyra" / "v1" / "errors.proto"
    text, n = re.subn(
        r"(ERROR_CODE_NOT_FOUND = \d+) \[\(error_mapping\) = \{[^}]*\}\]", r"\1", errors.read_text()
    )
    assert n == 1
    errors.write_text(text)
    code, output = run_cli(["--spec", str(spec), "--out", str(tmp_path / "out")], capsys)
    assert code == 1
    assert (
        "spec/proto/palyra/v1/errors.proto: ErrorCode value ERROR_CODE_NOT_FOUND "
        "has no (palyra.v1.error_mapping) option" in output
    )


def test_every_problem_is_reported_not_just_the_first(
    spec_copy: Callable[[str | None], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = spec_copy("unreachable_state")
    # A second, unrelated problem in the same run.
    (spec / "proto" / "palyra" / "v1" / "fixture_unmapped.proto").write_bytes(
        (
            REPO_ROOT
            / "tests/fixtures/specs/rpc_without_http/proto/palyra/v1/fixture_unmapped.proto"
        ).read_bytes()
    )
    code, output = run_cli(["--spec", str(spec), "--out", str(tmp_path / "out")], capsys)
    assert code == 1
    assert "'limbo' is unreachable" in output
    assert "RUN_STATE_LIMBO" in output
    assert "FixtureService.Ping has no HTTP mapping" in output


def test_path_variable_must_be_a_request_field(
    spec_copy: Callable[[str | None], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = spec_copy(None)
    gateway = spec / "proto" / "palyra" / "v1" / "gateway.proto"
    text = gateway.read_text().replace('{get: "/v1/runs/{run_id}"}', '{get: "/v1/runs/{rnu_id}"}')
    assert "rnu_id" in text
    gateway.write_text(text)
    code, output = run_cli(["--spec", str(spec), "--out", str(tmp_path / "out")], capsys)
    assert code == 1
    assert "rpc palyra.v1.GatewayService.GetRun: path variable {rnu_id} is not a field of" in output
