"""Config layering: defaults < TOML < PALYRA_* env < flags; bad input is CONFIG_INVALID."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from palyra.config import PalyraConfig, contradictions, env_names, load_config
from palyra.core.errors import ErrorCode, PalyraError


def test_defaults_need_no_configuration() -> None:
    config = load_config(env={})
    assert config == PalyraConfig()
    assert config.data_dir == Path("./palyra-data")
    assert (config.grpc.host, config.grpc.port) == ("127.0.0.1", 7443)
    assert (config.http.host, config.http.port) == ("127.0.0.1", 7142)
    assert config.http.max_request_bytes == 1024 * 1024


def test_layers_override_field_by_field(tmp_path: Path) -> None:
    toml = tmp_path / "palyra.toml"
    toml.write_text(
        'data_dir = "from-file"\n'
        "[grpc]\nport = 1111\n"
        "[http]\nport = 2222\nmax_request_bytes = 4096\n"
        '[auth]\nconnector_tokens = ["discord=abc"]\n'
        '[provider]\nkind = "scripted"\n'
    )
    config = load_config(
        config_file=toml,
        env={"PALYRA_HTTP_PORT": "3333", "PALYRA_ADMIN_TOKEN": "secret", "HOME": "/x"},
        overrides={"grpc.port": 0, "data_dir": None},
    )
    assert config.data_dir == Path("from-file")  # flag not given: the file wins
    assert config.grpc.port == 0  # flag beats file
    assert config.http.port == 3333  # env beats file
    assert config.http.max_request_bytes == 4096  # file beats default
    assert config.auth.admin_token == "secret"
    assert config.auth.connector_tokens == ("discord=abc",)


def test_env_config_path_and_lists(tmp_path: Path) -> None:
    toml = tmp_path / "c.toml"
    toml.write_text("[log]\nformat = \"json\"\n")
    config = load_config(env={"PALYRA_CONFIG": str(toml), "PALYRA_CONNECTOR_TOKENS": "a, slack=b"})
    assert config.log.format == "json"
    assert config.auth.connector_tokens == ("a", "slack=b")


@pytest.mark.parametrize(
    ("env", "setting"),
    [
        ({"PALYRA_GRPC_PORT": "seven"}, "grpc.port"),
        ({"PALYRA_GRPC_PORT": "70000"}, "grpc.port"),
        ({"PALYRA_LOG_FORMAT": "xml"}, "log.format"),
        ({"PALYRA_HTTP_MAX_REQUEST_BYTES": "0"}, "http.max_request_bytes"),
        ({"PALYRA_AUTH_REQUIRE_ULID_DEVICE_ID": "maybe"}, "auth.require_ulid_device_id"),
        ({"PALYRA_JOURNAL_BACKEND": "sqlite"}, "journal.backend"),
        ({"PALYRA_JOURNAL_BACKEND": "postgres"}, "journal.dsn"),
        ({"PALYRA_JOURNAL_BACKEND": "postgres", "PALYRA_JOURNAL_DSN": "host=x"}, "journal.dsn"),
        ({"PALYRA_JOURNAL_POOL_SIZE": "0"}, "journal.pool_size"),
    ],
)
def test_bad_values_name_the_setting(env: dict[str, str], setting: str) -> None:
    with pytest.raises(PalyraError) as info:
        load_config(env=env)
    assert info.value.code is ErrorCode.CONFIG_INVALID
    assert info.value.details["setting"] == setting


def test_the_postgres_journal_is_chosen_in_the_journal_section(tmp_path: Path) -> None:
    path = tmp_path / "palyra.toml"
    path.write_text('[journal]\nbackend = "postgres"\n'
                    'dsn = "postgresql://palyra@db.internal:5432/palyra"\npool_size = 8\n')
    journal = load_config(config_file=path, env={}).journal
    assert (journal.backend, journal.dsn, journal.pool_size) == (
        "postgres", "postgresql://palyra@db.internal:5432/palyra", 8)


def test_unknown_file_settings_are_refused(tmp_path: Path) -> None:
    toml = tmp_path / "c.toml"
    toml.write_text("[grpc]\nprot = 1\n")
    with pytest.raises(PalyraError, match=r"grpc\.prot: unknown setting"):
        load_config(config_file=toml)
    toml.write_text("[nonsense]\nx = 1\n")
    with pytest.raises(PalyraError, match="nonsense"):
        load_config(config_file=toml)
    toml.write_text("not toml [")
    with pytest.raises(PalyraError) as info:
        load_config(config_file=toml)
    assert info.value.code is ErrorCode.CONFIG_INVALID


def test_every_section_field_has_an_env_name() -> None:
    names = env_names()
    assert names["PALYRA_DATA_DIR"] == ("", "data_dir")
    assert names["PALYRA_GRPC_PORT"] == ("grpc", "port")
    assert names["PALYRA_ADMIN_TOKEN"] == ("auth", "admin_token")
    assert names["PALYRA_PROVIDER_KIND"] == ("provider", "kind")


def test_policies_live_beside_the_config_file_and_one_switch_enables_process_exec(
    tmp_path: Path,
) -> None:
    toml = tmp_path / "palyra.toml"
    toml.write_text("[tools]\nprocess_exec_enabled = true\n")
    config = load_config(config_file=toml, env={})
    assert config.policy.config_dir == tmp_path.resolve()
    assert config.policy.process_exec_enabled and config.tools.process_exec_enabled
    assert load_config(env={}).policy.config_dir is None  # no file: shipped defaults only


def test_a_bad_policy_beside_the_config_stops_serve_naming_file_and_line(tmp_path: Path) -> None:
    import os

    from palyra.testing.spawn import DaemonProcess

    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "team.cedar").write_text(
        '// our rules\npermit(principal, action, resource);\nforbid(principal action);\n')
    toml = tmp_path / "palyra.toml"
    toml.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PALYRA_")}
    daemon = DaemonProcess(tmp_path / "data", env=env, extra_args=("--config", str(toml)))
    with pytest.raises(RuntimeError) as info:
        daemon.start(timeout=20)
    message = str(info.value)
    assert "POLICY_INVALID" in message and "team.cedar" in message and "line 3" in message


def test_the_documented_example_config_loads() -> None:
    example = Path(__file__).resolve().parents[2] / "docs" / "palyra.example.toml"
    config = load_config(config_file=example, env={})
    assert config.provider.kind == "openai" and config.provider.api_key_env == "OPENAI_API_KEY"
    assert str(config.policy.tool_postures["add"]) == "ask_each_time"
    assert config.policy.config_dir == example.parent.resolve()


def test_compaction_settings_come_from_toml_and_env(tmp_path: Path) -> None:
    path = tmp_path / "palyra.toml"
    path.write_text("[engine]\ncompaction_trigger_tokens = 2000\ncompaction_enabled = false\n")
    config = load_config(config_file=path, env={"PALYRA_ENGINE_COMPACTION_MAX_PER_RUN": "1"})
    assert config.engine.compaction_trigger_tokens == 2000
    assert config.engine.compaction_enabled is False
    assert config.engine.compaction_max_per_run == 1
    assert config.engine.compaction_keep_user_messages == 6


def test_a_bad_value_in_the_file_is_reported_even_when_a_flag_overrides_it(
        tmp_path: Path) -> None:
    toml = tmp_path / "palyra.toml"
    toml.write_text('[grpc]\nport = "seven"\n')
    with pytest.raises(PalyraError) as info:
        load_config(config_file=toml, env={}, overrides={"grpc.port": 7000})
    assert info.value.code is ErrorCode.CONFIG_INVALID
    assert str(toml) in info.value.message and "grpc.port" in info.value.message
    with pytest.raises(PalyraError) as env_info:
        load_config(env={"PALYRA_ENGINE_MAX_TURNS": "many"}, overrides={})
    assert env_info.value.message.startswith("env: ") and "max_turns" in env_info.value.message


def test_the_defaults_do_not_contradict_each_other() -> None:
    config = PalyraConfig()
    assert contradictions(config) == []
    assert config.watchdog.approval_pending_s < config.engine.approval_timeout_s


def test_an_approval_incident_that_could_never_fire_is_refused() -> None:
    with pytest.raises(PalyraError) as info:
        load_config(env={"PALYRA_WATCHDOG_APPROVAL_PENDING_S": "600"})
    assert info.value.details["setting"] == "watchdog.approval_pending_s"
    assert "approval_timeout_s" in info.value.message
    # Either side may move; a disabled watchdog raises no incident to miss.
    load_config(env={"PALYRA_WATCHDOG_APPROVAL_PENDING_S": "600",
                     "PALYRA_ENGINE_APPROVAL_TIMEOUT_S": "900"})
    load_config(env={"PALYRA_WATCHDOG_APPROVAL_PENDING_S": "600",
                     "PALYRA_WATCHDOG_MODE": "disabled"})


def test_mcp_servers_are_an_array_of_tables(tmp_path: Path) -> None:
    toml = tmp_path / "palyra.toml"
    toml.write_text('''
[[tools.mcp]]
name = "files"
command = "python3"
args = ["server.py", "--root", "/srv"]
env = { ROOT = "/srv" }
tool_capabilities = { read = ["read_only"] }

[[tools.mcp]]
name = "remote"
url = "https://mcp.example.com/mcp"
header = "Authorization"
header_env = "REMOTE_MCP_TOKEN"
''')
    servers = load_config(config_file=toml, env={}).tools.mcp
    assert [s.name for s in servers] == ["files", "remote"]
    assert servers[0].args == ("server.py", "--root", "/srv")
    assert dict(servers[0].env) == {"ROOT": "/srv"}
    assert servers[0].capabilities_of("read") == {"read_only"}
    assert servers[0].capabilities_of("write") == frozenset()  # unknown: sensitive
    assert servers[1].url.endswith("/mcp") and servers[1].header_env == "REMOTE_MCP_TOKEN"


@pytest.mark.parametrize(("body", "problem"), [
    ('[[tools.mcp]]\nname = "x"\n', "exactly one of command or url"),
    ('[[tools.mcp]]\nname = "Bad Name"\ncommand = "x"\n', "must match"),
    ('[[tools.mcp]]\nname = "x"\ncommand = "x"\ncapabilities = ["root"]\n', "unknown capability"),
    ('[[tools.mcp]]\nname = "x"\ncommand = "x"\nshell = true\n', "tools.mcp[0].shell"),
    ('[[tools.mcp]]\nname = "x"\ncommand = "a"\n[[tools.mcp]]\nname = "x"\ncommand = "b"\n',
     "same name"),
])
def test_bad_mcp_servers_are_refused_with_the_setting(tmp_path: Path, body: str,
                                                     problem: str) -> None:
    toml = tmp_path / "palyra.toml"
    toml.write_text(body)
    with pytest.raises(PalyraError, match=re.escape(problem)) as err:
        load_config(config_file=toml, env={})
    assert err.value.code is ErrorCode.CONFIG_INVALID


def test_the_process_sandbox_section(tmp_path: Path) -> None:
    toml = tmp_path / "palyra.toml"
    toml.write_text('[tools.sandbox]\ntier = "c"\nworkspace = "ro"\ncpu_s = 5\n')
    sandbox = load_config(config_file=toml, env={}).tools.sandbox
    assert (sandbox.tier, sandbox.workspace, sandbox.cpu_s, sandbox.read_only) == ("c", "ro", 5,
                                                                                  True)
    toml.write_text('[tools.sandbox]\ntier = "d"\n')
    with pytest.raises(PalyraError, match=re.escape("tools.sandbox.tier")):
        load_config(config_file=toml, env={})
