"""The bundled embedding model, for real: loaded once per process, unit rows of dimension 384
that put similar sentences closer than unrelated ones, and a clear error for a missing model."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

import memstream.workers.embeddings as embeddings
from memstream.domain.errors import InvalidInputError
from memstream.workers.embeddings import BUNDLED_MODEL, Embedder, as_embed, load_embedder


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return load_embedder()


def test_the_bundled_model_is_loaded_once_per_process(embedder: Embedder) -> None:
    # When it is asked for again, by default or by name, the same object comes back
    assert load_embedder() is embedder
    assert load_embedder(BUNDLED_MODEL) is embedder
    assert embedder.model_name == BUNDLED_MODEL
    assert embedder.dimension == 384


def test_rows_are_unit_vectors_and_similar_sentences_are_closer(embedder: Embedder) -> None:
    # Given two sentences about the same thing and one about something else
    vectors = embedder.encode(
        [
            "I adopted a puppy last weekend.",
            "We got a new dog a few days ago.",
            "The quarterly tax return is due in April.",
        ]
    )
    # Then the rows are float32 unit vectors and the paraphrase is the nearer neighbour
    assert vectors.shape == (3, 384)
    assert vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    similar = float(vectors[0] @ vectors[1])
    unrelated = float(vectors[0] @ vectors[2])
    assert similar > unrelated + 0.2
    # And a query embeds to the same vector as the text, from the cache the second time
    query = embedder.encode_query("I adopted a puppy last weekend.")
    assert query.shape == (384,)
    assert np.allclose(query, vectors[0], atol=1e-5)
    assert embedder.encode_query("I adopted a puppy last weekend.") is query
    assert as_embed(embedder)(["I adopted a puppy last weekend."])[0] == pytest.approx(
        vectors[0].tolist(), abs=1e-5
    )


def test_empty_input_gives_an_empty_matrix(embedder: Embedder) -> None:
    empty = embedder.encode([])
    assert empty.shape == (0, 384)
    assert empty.dtype == np.float32


def test_a_missing_model_path_names_the_setting(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-model")
    with pytest.raises(InvalidInputError, match="MEMSTREAM_EMBEDDING_MODEL") as caught:
        load_embedder(missing)
    assert missing in str(caught.value)


def test_a_long_encode_lets_a_short_one_in_between_and_gives_the_same_rows(
    embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a long encode (16 holds of the model, 4 texts each) running in a thread
    monkeypatch.setattr(embeddings, "LOCK_CHUNK", 4)
    texts = [f"message number {n} about the garden and the weather" for n in range(64)]
    model_encode = embedder._model.encode
    started = threading.Event()

    def encode_chunk(*args: object, **kwargs: object) -> object:
        started.set()
        return model_encode(*args, **kwargs)

    monkeypatch.setattr(embedder._model, "encode", encode_chunk)
    done: dict[str, float] = {}
    rows: list[np.ndarray] = []

    def long_encode() -> None:
        rows.append(embedder.encode(texts))
        done["long"] = time.perf_counter()

    worker = threading.Thread(target=long_encode)
    worker.start()
    assert started.wait(30)
    assert embedder.busy  # (a recall embeds its query in a thread now, not on its event loop)
    # When a short encode asks meanwhile, it is served before the long one ends
    embedder.encode(["a short query"])
    done["short"] = time.perf_counter()
    worker.join()
    assert done["short"] < done["long"]
    assert not embedder.busy
    # And the chunked rows are the rows of one call (the model's batching aside)
    monkeypatch.setattr(embeddings, "LOCK_CHUNK", 256)
    assert np.allclose(rows[0], embedder.encode(texts), atol=1e-5)
