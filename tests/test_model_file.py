"""The bundled model runs as a Q4_0 copy made once in the user cache (rag.generator.local.model_file)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from gguf.quants import dequantize, quantize

from rag.core.config import GenerationSettings
from rag.generator.local.model import default_gguf_path, model_to_run
from rag.generator.local.model_file import fast_copy, runnable_model

Q4_0, Q4_1 = gguf.GGMLQuantizationType.Q4_0, gguf.GGMLQuantizationType.Q4_1


@pytest.fixture(autouse=True)
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    yield tmp_path / "cache"


@pytest.fixture
def copy(q4_0_model: Path) -> Path:
    """The bundled model's copy, made once a run (tests/conftest.py)."""
    return q4_0_model


@pytest.fixture
def small_model(tmp_path: Path) -> Path:
    """A GGUF file laid out as the bundled one (Q4_1 weights beside f32 ones), kilobytes in
    size: what converting a file does, checked without converting 135M weights again."""
    path = tmp_path / "small" / "SmolLM2-test.Q4_1.gguf"
    path.parent.mkdir()
    rng = np.random.default_rng(0)
    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_context_length(64)
    for layer in range(2):
        weights = rng.normal(size=(8, 64)).astype(np.float32)
        writer.add_tensor(f"blk.{layer}.attn_q.weight", quantize(weights, Q4_1), raw_dtype=Q4_1)
    writer.add_tensor("output_norm.weight", rng.normal(size=64).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_the_copy_holds_the_same_weights_as_q4_0(copy: Path) -> None:
    shipped = gguf.GGUFReader(default_gguf_path())
    made = gguf.GGUFReader(copy)
    assert [t.name for t in made.tensors] == [t.name for t in shipped.tensors]
    assert not any(t.tensor_type == Q4_1 for t in made.tensors)
    assert sum(t.tensor_type == Q4_0 for t in made.tensors) == sum(
        t.tensor_type == Q4_1 for t in shipped.tensors) > 0
    for old, new in zip(shipped.tensors, made.tensors, strict=True):
        if old.tensor_type != Q4_1:  # copied byte for byte
            assert new.tensor_type == old.tensor_type and bytes(new.data) == bytes(old.data)
            continue
        before, after = dequantize(old.data, Q4_1), dequantize(new.data, Q4_0)
        assert before.shape == after.shape
        # Q4_0 has 16 levels per block of 32, like Q4_1: the error stays under one step.
        step = np.abs(before).reshape(-1, 32).max(axis=1) / 7.5
        assert (np.abs(before - after).reshape(-1, 32).max(axis=1) <= step + 1e-6).all()
    for key in ("general.architecture", "tokenizer.chat_template", "llama.context_length"):
        assert made.fields[key].contents() == shipped.fields[key].contents()


def test_the_copy_is_made_once_and_a_q4_0_file_runs_as_it_is(copy: Path) -> None:
    made = copy.stat().st_mtime_ns
    assert fast_copy(default_gguf_path(), copy.parent) == copy
    assert copy.stat().st_mtime_ns == made  # not written again
    assert fast_copy(copy, copy.parent) == copy.resolve()  # nothing left to convert
    assert [p.name for p in copy.parent.iterdir()] == [copy.name]  # no partial file left


def test_a_copy_cut_short_is_made_again(small_model: Path, tmp_path: Path) -> None:
    first = fast_copy(small_model, tmp_path)
    whole = first.read_bytes()
    assert gguf.GGUFReader(first).tensors[0].tensor_type == Q4_0
    first.write_bytes(whole[:len(whole) // 2])  # damaged after it was made
    assert fast_copy(small_model, tmp_path) == first
    assert first.read_bytes() == whole


def test_the_bundled_model_runs_from_the_cache_a_configured_one_as_it_is(
        cache_home: Path, tmp_path: Path) -> None:
    own = tmp_path / "mine.gguf"
    own.write_bytes(b"whatever the user chose")
    assert model_to_run(GenerationSettings(local_model_path=str(own))) == str(own)
    assert not cache_home.exists()  # nothing converted for a model the user chose


def test_the_first_local_answer_says_it_makes_the_copy_then_runs_it(
        small_model: Path, cache_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = runnable_model(str(small_model))
    assert Path(first).parent == cache_home / "rag" / "models"
    assert Path(first).name.startswith("SmolLM2-test.") and first.endswith(".Q4_0.gguf")
    assert capsys.readouterr().err.startswith("note: making a faster (Q4_0) copy")
    assert runnable_model(str(small_model)) == first
    assert capsys.readouterr().err == ""  # made once: nothing to say the second time


def test_no_copy_can_be_made_runs_the_shipped_file_and_says_why(
        cache_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cache_home.parent.mkdir(parents=True, exist_ok=True)
    cache_home.write_text("a file where the cache folder should be")
    shipped = default_gguf_path()
    assert runnable_model(shipped) == shipped
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("note: running the shipped model file")
