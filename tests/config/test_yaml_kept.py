"""Plain YAML parses kept across processes (``cgbench.config.yaml_kept``): the same value as PyYAML's
``safe_load`` of the file as ``Path.read_text`` reads it, read back without parsing, and nothing kept
that JSON would change."""

from __future__ import annotations

import datetime

import pytest
import yaml

from cgbench.config import yaml_kept
from cgbench.user_cache import ENV_CACHE_DIR

DOCS = [
    b"defaults:\n  - model: hybrid\n  - cg: megatron\n  - _self_\nseed: 0\n",
    b"a: 1.5\r\nb: [x, null, true]\r\nc: {d: -3}\r\n",  # CRLF, as read_text gives it
    b"",  # an empty file is None
    b"- 1\n- two\n- 3.0e-3\n",
    b"\xef\xbb\xbfkey: value\n",  # a byte-order mark
]
NOT_JSON = [b"when: 2026-12-02\n", b"1: one\n", b"s: !!set {a, b}\n", b"x: .inf\n"]


@pytest.fixture
def kept(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_CACHE_DIR, str(tmp_path / "cache"))
    return tmp_path / "cache" / "yaml"


def _no_parse(monkeypatch) -> None:
    def refuse(data):
        raise AssertionError("parsed again")

    monkeypatch.setattr(yaml_kept, "_parse", refuse)


@pytest.mark.parametrize("data", DOCS)
def test_the_value_is_safe_loads_and_is_read_back_unparsed(kept, tmp_path, monkeypatch, data):
    path = tmp_path / "f.yaml"
    path.write_bytes(data)
    expected = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert yaml_kept.parse_plain(data) == expected
    _no_parse(monkeypatch)
    again = yaml_kept.parse_plain(data)
    assert again == expected and type(again) is type(expected)


@pytest.mark.parametrize("data", NOT_JSON)
def test_a_parse_json_would_change_is_not_kept(kept, data):
    value = yaml_kept.parse_plain(data)
    assert value == yaml.safe_load(data.decode())
    assert not kept.exists() or list(kept.iterdir()) == []


def test_a_date_stays_a_date(kept):
    assert yaml_kept.parse_plain(b"when: 2026-12-02\n") == {"when": datetime.date(2026, 12, 2)}
    assert yaml_kept.parse_plain(b"when: 2026-12-02\n") == {"when": datetime.date(2026, 12, 2)}


def test_a_corrupt_entry_is_parsed_afresh(kept):
    data = DOCS[0]
    yaml_kept.parse_plain(data)
    (entry,) = kept.iterdir()
    entry.write_text("{not json")
    assert yaml_kept.parse_plain(data) == yaml.safe_load(data.decode())
    assert entry.read_text().startswith("{\"defaults\"")


def test_off_keeps_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_CACHE_DIR, "off")
    assert yaml_kept.parse_plain(DOCS[0])["seed"] == 0
    assert not (tmp_path / "cache").exists()


def test_a_syntax_error_is_pyyamls(kept):
    with pytest.raises(yaml.YAMLError):
        yaml_kept.parse_plain(b"a: [1, 2\n")
