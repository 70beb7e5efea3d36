"""The compose testbed's files, checked statically (no docker): the .env parser, the Locust web
UI's published port, the scenarios mounted into the mqbed image."""

from __future__ import annotations

from pathlib import Path

from testbed.backends.compose import read_env_file


def test_env_file_is_read_with_compose_syntax(tmp_path: Path) -> None:
    path = tmp_path / ".env"
    path.write_text(
        "# comment\n\nexport MQBED_USER=mqbed-abc\nMQBED_PASSWORD='se cret#1'\n"
        'MQBED_REPO="/src/my repo"  # where\nEMPTY=\nNOVALUE\nLITERAL=${MQBED_USER}\n'
    )
    assert read_env_file(path) == {
        "MQBED_USER": "mqbed-abc",
        "MQBED_PASSWORD": "se cret#1",
        "MQBED_REPO": "/src/my repo",
        "EMPTY": "",
        "LITERAL": "${MQBED_USER}",  # read back as written
    }
    assert read_env_file(tmp_path / "missing.env") == {}
