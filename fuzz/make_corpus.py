#!/usr/bin/env python3
"""Writes the seed corpora of the fuzzers: fuzz/corpus/safetensors/ and fuzz/corpus/suite/.

Deterministic (same bytes on every run) and standard library only, so the seeds can be rebuilt
and reviewed anywhere. Each seed is one idea, named after it: valid files of every dtype the
reader supports, with and without metadata, an empty tensor, a scalar, the layout Python's
safetensors writes, and invalid files that each break one rule of the format
(https://github.com/huggingface/safetensors, "Format"). Seeds only write their own names: a crash
input added by hand (see fuzz/README.md) is never deleted, but the habit is to add it here too.

Usage: fuzz/make_corpus.py   (from anywhere)
"""
import json
import math
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus", "safetensors")
SUITE_OUT = os.path.join(HERE, "corpus", "suite")

SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I8": 1, "U8": 1}


def pack_file(header_text, data=b"", pad=True):
    """8-byte little-endian length, the header (space-padded to 8 like the Python library), data."""
    header = header_text.encode("utf-8")
    if pad:
        header += b" " * ((8 - len(header) % 8) % 8)
    return struct.pack("<Q", len(header)) + header + data


def canonical(tensors, metadata=None):
    """A valid file: tensors = [(name, dtype, shape, raw bytes)], data in sorted-name order."""
    header, data = {}, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in sorted(tensors):
        assert len(raw) == math.prod(shape) * SIZES[dtype], name
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    return pack_file(json.dumps(header, separators=(",", ":"), sort_keys=True), data)


def le(fmt, values):
    return struct.pack("<" + fmt * len(values), *values)


def seeds():
    inf, nan = float("inf"), float("nan")
    s = {}
    # --- valid: one per dtype, special values included ---------------------------------------
    s["valid_f64_specials"] = canonical([("x", "F64", [2, 3], le("d", [1.0, -0.0, 5e-324, inf, -inf, 0.1]))])
    s["valid_f32_nan_payload"] = canonical(
        [("s", "F32", [4], le("I", [0x3F800000, 0x7F800001, 0xFFC00123, 0x00000001]))])
    s["valid_f16_specials"] = canonical(
        [("h", "F16", [2, 4], le("H", [0x3C00, 0x8000, 0x0001, 0x03FF, 0x7C00, 0xFC00, 0x7E00, 0x7BFF]))])
    s["valid_bf16"] = canonical([("b", "BF16", [3], le("H", [0x3F80, 0x0001, 0xFF81]))])
    s["valid_i64_extremes"] = canonical(
        [("i", "I64", [4], le("q", [-(2**63), 2**63 - 1, 2**53 + 1, 42]))])  # 2^53 + 1: to_doubles refuses
    s["valid_i32"] = canonical([("w", "I32", [2], le("i", [-(2**31), 2**31 - 1]))])
    s["valid_i8"] = canonical([("c", "I8", [3], le("b", [-128, 0, 127]))])
    s["valid_u8"] = canonical([("u", "U8", [2, 2], bytes([0, 1, 128, 255]))])
    # --- valid: structure ------------------------------------------------------------------
    s["valid_metadata_multi"] = canonical(
        [("q", "F32", [2], le("f", [1.5, -2.0])), ("k", "I8", [1], b"\x07"), ("g", "F16", [1], le("H", [0x3555]))],
        metadata={"format": "pt", "note": "seed"})
    s["valid_empty_tensor"] = canonical([("e", "F32", [0, 3], b""), ("x", "U8", [1], b"\x05")])
    s["valid_scalar"] = canonical([("s", "F64", [], le("d", [2.5]))])
    s["valid_no_tensors"] = pack_file("{}")
    s["valid_metadata_only"] = pack_file('{"__metadata__":{"a":"","b":"\\u00e9\\n"}}')
    # Python's safetensors: its own field order, tensors laid out by alignment (not by name).
    s["valid_python_layout"] = pack_file(
        '{"__metadata__":{"format":"np"},"n":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},'
        '"w":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}',
        le("q", [7]) + le("f", [1.5, -2.0]))
    # Empty tensors sharing an offset at a boundary; whitespace in the JSON; no padding.
    s["valid_shared_empty_offsets"] = pack_file(
        '{ "a" : {"dtype":"U8","shape":[0],"data_offsets":[0,0]},\n'
        ' "b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"c":{"dtype":"I64","shape":[2,0],"data_offsets":[4,4]}}',
        le("f", [1.0]), pad=False)
    s["valid_unicode_name"] = pack_file(
        '{"\\u00e9t\\u00e9 \\"x\\"":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
        '"\u20ac":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}',  # a raw UTF-8 euro sign
        b"\x01\x02")
    s["valid_16_dims"] = canonical([("d", "U8", [1] * 16, b"\x09")])
    # --- invalid: one broken rule each -------------------------------------------------------
    good = canonical([("o", "F32", [2, 2], le("f", [1, 2, 3, 4]))])
    s["invalid_truncated"] = good[:-3]
    s["invalid_short"] = b"\x10\x00\x00"
    s["invalid_header_too_long"] = struct.pack("<Q", 2**63) + b"{}"
    s["invalid_bad_json"] = pack_file('{"o":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]', le("f", [0] * 4))
    s["invalid_overlapping_offsets"] = pack_file(
        '{"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[8],"data_offsets":[4,12]}}',
        bytes(12))
    s["invalid_hole"] = pack_file(
        '{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[8,12]}}',
        bytes(12))
    s["invalid_trailing_bytes"] = good + b"\x00\x00"
    s["invalid_duplicate_key"] = pack_file(
        '{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}',
        b"\x01")
    s["invalid_unknown_dtype"] = pack_file('{"a":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}}', b"\x01")
    s["invalid_metadata_number"] = pack_file('{"__metadata__":{"k":1}}')
    s["invalid_byte_count"] = pack_file('{"o":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}}', bytes(12))
    # Found while testing: nlohmann's lexer stops at a NUL byte, so this passed as "{}" until the
    # reader refused NUL bytes in the header (Python's reader refuses it too).
    s["invalid_nul_in_header"] = pack_file('{}\x00{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"\x01")
    s["invalid_shape_overflow"] = pack_file(
        '{"a":{"dtype":"U8","shape":[4294967296,4294967296,0],"data_offsets":[0,0]}}')
    return s


def suite_seeds():
    """Suite files (docs/fixture-format.md, "Suite files"): the shipped suites, one small valid case
    per model and feature, and invalid cases that each break one rule of the parser."""
    shipped = os.path.join(HERE, "..", "fixtures", "suite")
    s = {}
    for name in ("golden", "default"):
        with open(os.path.join(shipped, name + ".json"), "rb") as f:
            s["shipped_" + name] = f.read()

    def one(case, name="seed"):
        return json.dumps({"suite": name, "cases": [case]}, sort_keys=True).encode()

    small = {"name": "c", "T": 3, "K": 2, "V": 2}
    for model in ("gla", "delta_net", "gated_delta_net", "kda", "kdn_diagonal", "kdn_isotropic", "kla", "dense",
                  "information"):
        s["valid_" + model] = one(dict(small, model=model, initial_state=True))
    s["valid_varlen"] = one({"name": "v", "model": "gated_delta_net", "cu_seqlens": [0, 0, 1, 5], "K": 2, "V": 2})
    s["valid_gva"] = one({"name": "g", "model": "kda", "H": 1, "HV": 2, "T": 3, "K": 2, "V": 2})
    s["valid_ranges_log10"] = one(dict(small, model="kla", ranges={"Lambda": {"log10": [-3, 3]}, "a_bar": [0.9, 1]}))
    s["valid_bf16_keys"] = one(dict(small, model="delta_net", dtype="BF16", keys="near_zero"))
    s["invalid_not_json"] = b'{"cases": ['
    s["invalid_cases_not_array"] = b'{"cases": {}}'
    s["invalid_suite_name_number"] = b'{"suite": 5, "cases": []}'
    s["invalid_dtype_number"] = one(dict(small, model="gla", dtype=5))
    s["invalid_bool_string"] = one(dict(small, model="gla", initial_state="yes"))
    s["invalid_size_negative"] = one(dict(small, model="gla", T=-1))
    s["invalid_size_huge"] = one(dict(small, model="gla", T=2 ** 24 + 1))
    s["invalid_cu_seqlens_huge"] = one({"name": "v", "model": "gla", "cu_seqlens": [0, 2 ** 40], "K": 2, "V": 2})
    s["invalid_cu_seqlens_decreasing"] = one({"name": "v", "model": "gla", "cu_seqlens": [0, 3, 1]})
    s["invalid_domain_gate"] = one(dict(small, model="gla", ranges={"g": [0, 1]}))
    s["invalid_domain_a_bar"] = one(dict(small, model="kla", ranges={"a_bar": [0.5, 1.5]}))
    s["invalid_range_overflow"] = b'{"cases": [{"name": "c", "model": "gla", "ranges": {"v": [-1e400, 1]}}]}'
    s["invalid_name_path"] = one(dict(small, model="gla", name="../x"))
    s["invalid_duplicate_names"] = json.dumps(
        {"cases": [dict(small, model="gla"), dict(small, model="gla")]}).encode()
    s["invalid_unknown_field"] = one(dict(small, model="gla", colour="red"))
    s["invalid_hv_without_gva"] = one(dict(small, model="dense", HV=2))
    return s


def write_seeds(out, seeds_by_name, extension):
    os.makedirs(out, exist_ok=True)
    for name, data in sorted(seeds_by_name.items()):
        with open(os.path.join(out, name + extension), "wb") as f:
            f.write(data)
    print(f"wrote {len(seeds_by_name)} seeds to {out}")


def main():
    write_seeds(OUT, seeds(), ".safetensors")
    write_seeds(SUITE_OUT, suite_seeds(), ".json")


if __name__ == "__main__":
    main()
