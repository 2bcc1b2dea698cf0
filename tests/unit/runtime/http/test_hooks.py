"""Webhook signatures and dedupe keys (cronrd/runtime/http/hooks.py)."""

from __future__ import annotations

import hashlib
import hmac
import re

import pytest

from cronrd.errors import UsageError
from cronrd.runtime.http.hooks import dedupe_value, run_key, sign


def test_the_signature_is_hmac_sha256_of_timestamp_dot_body():
    want = hmac.new(b"key", b"1700000000.{}", hashlib.sha256).hexdigest()
    assert sign(b"key", "1700000000", b"{}") == "sha256=" + want


def test_the_dedupe_value_is_read_from_the_json_body():
    assert dedupe_value(b'{"delivery": {"id": "d-1"}}', ("delivery", "id")) == "d-1"
    assert dedupe_value(b'{"seq": 42}', ("seq",)) == "42"
    for body, words in ((b"not json", "not JSON"), (b'{"x": 1}', "has no $.seq"),
                        (b'{"seq": {"a": 1}}', "non-empty string or a number"),
                        (b'{"seq": ""}', "non-empty string"), (b'{"seq": true}', "number")):
        with pytest.raises(UsageError, match=re.escape(words)):
            dedupe_value(body, ("seq",))


def test_a_run_key_is_readable_when_it_can_be_and_hashed_otherwise():
    assert run_key("deploy", "d-1") == "hook:deploy:d-1"
    spaced = run_key("deploy", "a b")
    assert spaced == "hook:deploy:sha256:" + hashlib.sha256(b"a b").hexdigest()
    assert run_key("deploy", "x" * 500).startswith("hook:deploy:sha256:")
    assert run_key("deploy", "a b") != run_key("deploy", "a  b")
