"""Secret flags followed by their value are redacted, in text and in argv lists (issue 12, item 7).

``--password=VALUE`` and ``password=VALUE`` were always caught; ``--password VALUE``
was not. Each form, for each secret name, is redacted once and stays redacted
(a second pass changes nothing), and look-alikes are left alone.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from palyra.core.redaction import REDACTED, redact

NAMES = ["password", "passwd", "pwd", "token", "secret", "api-key", "api_key", "apikey",
         "access-key", "client-secret"]
_value = st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126,
                                        exclude_characters="\"'<>,;&"), min_size=1, max_size=30)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dashes", ["-", "--"])
def test_flag_then_value_in_text(name: str, dashes: str) -> None:
    text = f"mysql -u root {dashes}{name} hunter2x --host db"
    result = redact(text)
    assert result.value == f"mysql -u root {dashes}{name} {REDACTED} --host db"
    assert result.paths == ("$",)
    assert redact(result.value).paths == ()


@pytest.mark.parametrize("name", NAMES)
def test_flag_then_value_in_argv(name: str) -> None:
    argv = ["mysql", f"--{name}", "hunter2", "-u", "root"]
    result = redact({"argv": argv})
    assert result.value == {"argv": ["mysql", f"--{name}", REDACTED, "-u", "root"]}
    assert result.paths == ("$.argv[2]",)
    assert redact(result.value).paths == ()


@given(name=st.sampled_from(NAMES), value=_value)
def test_the_value_never_survives(name: str, value: str) -> None:
    assert value not in str(redact(f"cmd --{name} {value}").value).split()[2:]
    assert redact(["cmd", f"--{name}", value]).value[2] == REDACTED


def test_look_alikes_are_content() -> None:
    for text in ("check --token-file ./path", "pass --passwords-are-long now",
                 "set x--password y", "--tokens 5"):
        assert redact(text).paths == (), text
    assert redact(["--password-file", "./pw"]).paths == ()
