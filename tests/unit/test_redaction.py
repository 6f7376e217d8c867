"""Credentials never reach error or log text (issue 10, item 6): redact_url, redact and the
chained causes of wrapped driver errors."""

from __future__ import annotations

import traceback

import pytest

from memstream.domain.errors import RedactedError, UnavailableError
from memstream.domain.redaction import redact, redact_url, redacted_exception, url_secrets
from memstream.settings import Settings


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("nats://alice:secret@host:4222", "nats://alice:***@host:4222"),
        ("nats://tok@host", "nats://***@host"),
        ("tls://alice:p@ss:w0rd@host:4222", "tls://alice:***@host:4222"),
        ("alice:secret@host:4222", "alice:***@host:4222"),
        ("postgresql://user:pw@db.example/memstream", "postgresql://user:***@db.example/memstream"),
        (
            "postgresql://db/ms?user=u&password=pw&sslmode=require",
            "postgresql://db/ms?user=u&password=***&sslmode=require",
        ),
        (
            "nats://alice:secret@h1:4222,nats://bob:other@h2:4222",
            "nats://alice:***@h1:4222,nats://bob:***@h2:4222",
        ),
        ("nats://127.0.0.1:4222", "nats://127.0.0.1:4222"),
        ("host:4222", "host:4222"),
    ],
)
def test_redact_url_masks_the_password_or_token_and_keeps_the_rest(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_redact_masks_urls_inside_text_and_given_secrets() -> None:
    # Given a driver message that quotes a URL, and a password given apart from it
    text = "failed: connect to 'nats://alice:s3cret@10.0.0.5:4222' as bob with hunter2"
    # Then the URL's password and the given secret are masked, the rest kept
    assert redact(text, ["hunter2", None, ""]) == (
        "failed: connect to 'nats://alice:***@10.0.0.5:4222' as bob with ***"
    )
    assert url_secrets("nats://alice:s3cret@h") == ["s3cret"]
    assert url_secrets("nats://tok@h") == ["tok"]
    assert url_secrets("nats://h:4222") == []
    assert url_secrets(None) == []


# Built at run time, so that the source lines a traceback quotes do not hold it.
SECRET = "s3" + "cret"


def _raise_chain() -> Exception:
    try:
        try:
            raise OSError(f"connect to nats://alice:{SECRET}@127.0.0.1:1 refused")
        except OSError as inner:
            raise ConnectionError(f"giving up on alice:{SECRET}") from inner
    except ConnectionError as error:
        return error


def test_a_chained_driver_error_that_quotes_a_secret_is_replaced_by_a_masked_stand_in() -> None:
    # Given a driver error whose text and whose cause's text hold the secret
    error = _raise_chain()
    # When ours is raised from its redacted form
    with pytest.raises(UnavailableError) as caught:
        raise UnavailableError("cannot reach NATS") from redacted_exception(error, [SECRET])
    # Then the whole printed chain is free of it, and still says what happened
    printed = "".join(traceback.format_exception(caught.value))
    assert SECRET not in printed
    assert "ConnectionError: giving up on alice:***" in printed
    assert "OSError: connect to nats://alice:***@127.0.0.1:1 refused" in printed
    assert isinstance(caught.value.__cause__, RedactedError)


def test_a_driver_error_without_secrets_is_chained_as_it_is() -> None:
    error = ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 1)")
    assert redacted_exception(error, ["s3cret", None]) is error


def test_the_repr_of_settings_masks_credentials() -> None:
    # Given settings with a password in a URL, a password, a token and an API key
    settings = Settings(
        nats_url=f"nats://alice:{SECRET}@host:4222",
        nats_user="alice",
        nats_password=SECRET + "1",
        nats_token=SECRET + "2",
        database_url=f"postgresql://bob:{SECRET}3@db/ms",
        llm_api_key=SECRET + "4",
    )
    # Then its repr (what a log line or an assertion shows) holds none of them
    shown = repr(settings)
    assert SECRET not in shown
    assert "nats_url='nats://alice:***@host:4222'" in shown
    assert "nats_password='***'" in shown
    assert "nats_token='***'" in shown
    assert "database_url='postgresql://bob:***@db/ms'" in shown
    assert "llm_api_key='***'" in shown
    assert "nats_user='alice'" in shown
    # And the values themselves are intact
    assert settings.nats_password == SECRET + "1"
