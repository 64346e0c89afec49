"""X-Ledger-Password: what the CLI sends (cli._http.password_header) is what the
server reads back (app.deps.ledger_password), for any password."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.deps import ledger_password
from cli._http import password_header


@pytest.mark.parametrize(("password", "header"), [
    ("", ""),
    ("pw", "pw"),
    ("100%", "100%"),
    ("a%41", "a%41"),
    ("inner space", "inner space"),
    ("pässwörd", "UTF-8''p%C3%A4ssw%C3%B6rd"),
    ("密码", "UTF-8''%E5%AF%86%E7%A0%81"),
    (" pw ", "UTF-8''%20pw%20"),
    ("tab\t", "UTF-8''tab%09"),
    ("UTF-8''x", "UTF-8''UTF-8%27%27x"),
    ("utf-8''x", "UTF-8''utf-8%27%27x"),
])
def test_header_values(password, header):
    assert password_header(password) == header
    assert ledger_password(header) == password


@given(st.text(max_size=64))
def test_every_password_goes_as_visible_ascii_and_comes_back(password):
    header = password_header(password)
    # What httpx, fetch and every HTTP stack can send unchanged: visible ASCII with
    # no surrounding spaces.
    assert header == header.strip() and all(" " <= c <= "~" for c in header)
    assert ledger_password(header) == password
