"""What the service tells whom (issue 14, item 6): the admin token is never
shown, and where the data lives is for admins (that error details name no
files: test_errors_and_boundaries.py, the corrupted entry)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from app import ServiceSettings
from common.errors import InvalidSetting

from .conftest import (
    ADMIN_TOKEN,
    LiveServer,
)

TOKEN = "tok-7f3c9a1e5b2d4c68"  # distinctive, so that any leak is found by a search
BEARER = {"Authorization": f"Bearer {TOKEN}"}


def test_the_admin_token_is_masked_in_settings_and_their_errors(tmp_path):
    settings = ServiceSettings.load(environ={"LEDGERD_ADMIN_TOKEN": TOKEN})
    assert settings.admin_token_value == TOKEN
    for shown in (repr(settings), str(settings), settings.model_dump_json(),
                  str(settings.model_dump())):
        assert TOKEN not in shown
    config = tmp_path / "ledgerd.toml"
    config.write_text(f'admin_token = ["{TOKEN}"]\n')
    with pytest.raises(InvalidSetting, match="ADMIN_TOKEN") as refused:
        ServiceSettings.load(config, environ={})
    assert TOKEN not in str(refused.value)


@pytest.fixture(scope="module")
def token_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = LiveServer(tmp_path_factory.mktemp("secrets") / "data",
                        {"admin_token": TOKEN, "log_level": "DEBUG", "access_log": True}).start()
    try:
        yield server
    finally:
        server.stop()


def test_the_admin_token_never_reaches_logs_or_answers(token_server):
    """Proves the token stays secret on a live server logging at DEBUG with the
    access log on: start-up, right and wrong tokens, admin calls and errors
    leave no trace of it in the log or in any answer."""
    answers = []
    with httpx.Client(base_url=token_server.url) as client:
        for headers in ({}, {"Authorization": "Bearer wrong"}, BEARER):
            answers.append(client.put("/api/v1/bookie/state/readonly", headers=headers,
                                      json={"read_only": False}))
            answers.append(client.get("/api/v1/bookie/info", headers=headers))
        answers += [client.get(path) for path in ("/metrics", "/openapi.json", "/nowhere")]
        answers.append(client.put("/api/v1/bookie/gc", headers=BEARER, content=b"{"))
    assert [a.status_code for a in answers[:2]] == [401, 200]
    assert answers[4].status_code == 200
    for answer in answers:
        assert TOKEN not in answer.text and TOKEN not in str(answer.headers)
    token_server.stop()  # flush everything, shutdown included, to the log
    log = token_server.log_path.read_text() if token_server.log_path else ""
    assert "/api/v1/bookie/state/readonly" in log  # the access log did run
    assert TOKEN not in log
    token_server.start()


def test_bookie_info_shows_where_data_lives_to_admins_only(token_server, make_client):
    url = f"{token_server.url}/api/v1/bookie/info"
    anonymous = httpx.get(url).json()
    assert (anonymous["data_dir"], anonymous["journal_device"]) == (None, None)
    assert anonymous["bookie_id"] and anonymous["total_space"] > 0
    for wrong in ({"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"}):
        assert httpx.get(url, headers=wrong).json()["data_dir"] is None
    admin = httpx.get(url, headers=BEARER).json()
    assert admin["data_dir"] == str(token_server.data_dir)
    assert admin["journal_device"] == str(token_server.data_dir / "journal.dev")
    # Without a token (loopback only) there is no one to hide them from.
    assert make_client().get("/api/v1/bookie/info").json()["data_dir"] is not None
    with_token = make_client(admin_token=ADMIN_TOKEN)
    assert with_token.get("/api/v1/bookie/info").json()["data_dir"] is None

