"""The safetensors file format, read and written with numpy (docs/fixture-format.md).

bytes [0, 8): N, little-endian u64; [8, 8 + N): a JSON header mapping each tensor name to
{"dtype", "shape", "data_offsets"} plus an optional "__metadata__" of strings; then the data,
little-endian, row-major. The tool's reader is the strict one (it checks every candidate this module
writes); this one reads the fixtures the tool wrote.
"""
import json
import os
import struct
import tempfile

import numpy as np

# dtype name -> numpy dtype of its stored elements (BF16 is read as its 16-bit patterns).
_STORED = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
}


def bfloat16_to_float32(bits):
    """bfloat16 bit patterns (uint16) widened to float32: exact (bfloat16 is float32's top half)."""
    return (np.asarray(bits, dtype=np.uint32) << 16).view(np.float32)


def read_metadata(path):
    """The "__metadata__" object alone (reads only the header, not the tensors)."""
    with open(path, "rb") as f:
        size = f.read(8)
        if len(size) < 8:
            raise ValueError(f"{path}: shorter than the 8-byte header size")
        (n,) = struct.unpack("<Q", size)
        header = f.read(n)
    if len(header) < n:
        raise ValueError(f"{path}: the header size {n} runs past the end of the file")
    return json.loads(header.decode("utf-8")).get("__metadata__", {}) or {}


def read(path):
    """(tensors, metadata): tensors maps each name to (dtype name, shape tuple, numpy array of the
    stored elements); metadata is the "__metadata__" object (strings) or {}."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: shorter than the 8-byte header size")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise ValueError(f"{path}: the header size {n} runs past the end of the file")
    header = json.loads(data[8 : 8 + n].decode("utf-8"))
    metadata = header.pop("__metadata__", {}) or {}
    buffer = memoryview(data)[8 + n :]
    tensors = {}
    for name, entry in header.items():
        dtype = entry["dtype"]
        if dtype not in _STORED:
            raise ValueError(f"{path}: tensor {name} has dtype {dtype}, which this reader does not know")
        begin, end = entry["data_offsets"]
        shape = tuple(entry["shape"])
        array = np.frombuffer(buffer[begin:end], dtype=_STORED[dtype]).reshape(shape)
        tensors[name] = (dtype, shape, array)
    return tensors, metadata


def write(path, arrays, metadata=None):
    """Writes {name: numpy array} (float64 as F64, float32 as F32, float16 as F16, int64 as I64) to
    `path` atomically: a temporary file in the same directory, then a rename."""
    names = sorted(arrays)
    header, chunks, offset = {}, [], 0
    for name in names:
        array = np.ascontiguousarray(arrays[name])
        kinds = {np.dtype("float64"): "F64", np.dtype("float32"): "F32", np.dtype("float16"): "F16",
                 np.dtype("int64"): "I64"}
        if array.dtype not in kinds:
            raise TypeError(f"{name}: dtype {array.dtype} cannot be written (float64, float32, float16 or int64)")
        raw = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": kinds[array.dtype], "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # the data buffer starts 8-byte aligned
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".candidate.", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(struct.pack("<Q", len(text)))
            f.write(text)
            for raw in chunks:
                f.write(raw)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
