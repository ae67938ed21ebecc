#!/usr/bin/env python3
"""Interoperability check: a KalmanOracle fixture as Python's safetensors library reads it.

    read_fixture.py FIXTURE INSPECT_JSON               compare; exit 0 match, 1 mismatch, 2 bad usage
    read_fixture.py --self-test FIXTURE INSPECT_JSON   meta-check: corrupted copies must be caught

INSPECT_JSON is the output of `kalman-oracle inspect --json FIXTURE` saved to a file. The fixture is
loaded with safetensors.numpy.load_file and safetensors.safe_open(path, "np") (the Hugging Face
library, independent of this project's C++ reader), and checked against what the C++ tool says:

  * metadata()["kalman_oracle"], parsed as JSON, equals inspect's "metadata" (types included:
    1 and 1.0 differ);
  * the set of tensor names, every dtype and every shape equal inspect's;
  * every tensor's SHA-256 (its numpy array as little-endian bytes, tobytes()) equals inspect's;
  * the first values (up to 8) equal inspect's "first" exactly (bit for bit as binary64; -0.0 is
    not 0.0; a JSON null, which is how the tool writes a NaN or an infinity, must be non-finite);
  * what the metadata says of the data holds (its inputs are the file's inputs, cu_seqlens
    included; residual signs stored away from narrow midpoints are described as such; the query
    scale is stated as the exact 1/sqrt(K));
  * for a GLA fixture, o recomputed in float64 numpy from the inputs (fla conventions: per (b, h),
    S = S_0; S = diag(exp(g_t)) S + k_t v_tᵀ; o_t = Sᵀ (q_t K^-1/2)) is within 1e-12 max|o| of the
    fixture's o (and final_state within 1e-12 max|final_state| of the fixture's).

The self-test first requires the untouched comparison to pass, then corrupts one value at a time in
an in-memory copy of the inspect JSON (a first value by one ulp, a hash digit, a dtype, a shape
extent, a metadata value, a tensor name) and, for a GLA fixture, one element of the loaded o; each
corruption must be reported as a mismatch.
"""
import copy
import hashlib
import json
import math
import struct
import sys

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file

# numpy dtype -> safetensors dtype name. numpy has no bfloat16: BF16 tensors are never numpy arrays
# from the library (see load_fixture).
NUMPY_TO_SAFETENSORS = {
    np.dtype("float64"): "F64", np.dtype("float32"): "F32", np.dtype("float16"): "F16",
    np.dtype("int64"): "I64", np.dtype("int32"): "I32", np.dtype("int16"): "I16", np.dtype("int8"): "I8",
    np.dtype("uint64"): "U64", np.dtype("uint32"): "U32", np.dtype("uint16"): "U16", np.dtype("uint8"): "U8",
    np.dtype("bool"): "BOOL",
}
INTEGER_DTYPES = {"I64", "I32", "I16", "I8", "U64", "U32", "U16", "U8", "BOOL"}


class Tensor:
    """One tensor: its dtype name and shape as the library reports them, its values (a numpy array;
    for BF16 the exact values widened to float32) and its raw little-endian bytes."""

    def __init__(self, dtype, shape, values, raw):
        self.dtype, self.shape, self.values, self.raw = dtype, tuple(shape), values, raw


def read_raw_tensors(path):
    """This script's own minimal safetensors reader: {name: (dtype, shape, bytes)} straight from the
    header's data_offsets. Used for BF16, which the numpy backend cannot return."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack_from("<Q", blob, 0)
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = memoryview(blob)[8 + n:]
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        out[name] = (entry["dtype"], tuple(entry["shape"]), bytes(data[begin:end]))
    return out


def bf16_to_float32(raw, shape):
    """bfloat16 is the top half of a binary32: shifting the 16 bits up gives the exact value."""
    bits = np.frombuffer(raw, dtype="<u2").astype("<u4") << 16
    return bits.view("<f4").astype(np.float32).reshape(shape)


def le_bytes(array):
    return np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<"), copy=False).tobytes()


def load_fixture(path):
    """Returns (metadata JSON text, {name: Tensor}) through the safetensors library."""
    with safe_open(path, "np") as f:
        metadata = f.metadata() or {}
        names = list(f.keys())
        # get_slice reports dtype and shape without converting, so it works for BF16 too.
        declared = {name: (f.get_slice(name).get_dtype(), tuple(f.get_slice(name).get_shape())) for name in names}
        opened = {name: f.get_tensor(name) for name in names if declared[name][0] != "BF16"}
    if "kalman_oracle" not in metadata:
        raise ValueError(f"{path}: no __metadata__['kalman_oracle']")
    # safetensors' numpy backend refuses BF16 ("data type 'bfloat16' not understood": numpy has no
    # bfloat16), and load_file fails for the whole file then. So load_file is used for files
    # without BF16, and the BF16 tensors' bytes are read by hand from the header's offsets
    # (read_raw_tensors), their values widened exactly to float32.
    has_bf16 = any(dtype == "BF16" for dtype, _ in declared.values())
    loaded = opened if has_bf16 else load_file(path)
    raw = read_raw_tensors(path)
    if set(raw) != set(names) or set(loaded) != set(opened):
        raise ValueError(f"{path}: the tensor names differ between safe_open, load_file and the raw header")

    tensors = {}
    for name in names:
        dtype, shape = declared[name]
        raw_dtype, raw_shape, raw_bytes = raw[name]
        if (raw_dtype, raw_shape) != (dtype, shape):
            raise ValueError(f"{path}: tensor '{name}': the raw header says {raw_dtype} {raw_shape}, the library {dtype} {shape}")
        if dtype == "BF16":
            tensors[name] = Tensor(dtype, shape, bf16_to_float32(raw_bytes, shape), raw_bytes)
            continue
        array = loaded[name]
        if le_bytes(array) != le_bytes(opened[name]):
            raise ValueError(f"{path}: tensor '{name}': load_file and safe_open disagree")
        numpy_dtype = NUMPY_TO_SAFETENSORS.get(array.dtype.newbyteorder("="))
        if numpy_dtype != dtype or tuple(array.shape) != shape:
            raise ValueError(f"{path}: tensor '{name}': numpy array {array.dtype} {array.shape} for {dtype} {shape}")
        if le_bytes(array) != raw_bytes:  # the hand reader agrees with the library where both work
            raise ValueError(f"{path}: tensor '{name}': the raw bytes differ from the library's array")
        tensors[name] = Tensor(numpy_dtype, array.shape, array, le_bytes(array))
    return metadata["kalman_oracle"], tensors


def strict_equal(a, b):
    """JSON equality that tells 1 from 1.0 and True from 1."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(strict_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(strict_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b) or (math.isnan(a) and math.isnan(b))
    return a == b


def same_value(ours, theirs, integer):
    """One of the first values: ours from numpy, theirs from the inspect JSON."""
    if integer:
        return isinstance(theirs, (int, float)) and not isinstance(theirs, bool) and int(ours) == theirs
    ours = float(ours)  # exact: every float dtype widens exactly to binary64
    if theirs is None:  # nlohmann::json writes NaN and infinities as null
        return not math.isfinite(ours)
    if not isinstance(theirs, (int, float)) or isinstance(theirs, bool):
        return False
    return struct.pack("<d", ours) == struct.pack("<d", float(theirs))


def gla_numpy(t, meta):
    """GLA in float64 numpy, fla conventions (the model check); returns (o, final_state)."""
    q, k, v, g = (t[n].values.astype(np.float64) for n in ("q", "k", "v", "g"))
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    if HV % H:
        raise ValueError("GLA: HV is not a multiple of H")
    # Grouped value heads: value head j reads query/key head j // (HV / H); np.repeat lays them out so.
    q, k = np.repeat(q, HV // H, axis=2), np.repeat(k, HV // H, axis=2)
    if "cu_seqlens" in t:
        cu = [int(x) for x in t["cu_seqlens"].values.reshape(-1)]
        sequences = [(0, cu[i], cu[i + 1]) for i in range(len(cu) - 1)]
    else:
        sequences = [(b, 0, T) for b in range(B)]
    N = len(sequences)
    if "initial_state" in t:
        S = t["initial_state"].values.astype(np.float64).copy()
    else:
        S = np.zeros((N, HV, K, V))
    if S.shape != (N, HV, K, V):
        raise ValueError(f"GLA: initial_state has shape {S.shape}, expected {(N, HV, K, V)}")
    scale = K ** -0.5
    o = np.zeros((B, T, HV, V))
    for n, (b, begin, end) in enumerate(sequences):
        state = S[n]  # [HV, K, V]
        for i in range(begin, end):
            state = np.exp(g[b, i])[:, :, None] * state + k[b, i][:, :, None] * v[b, i][:, None, :]
            o[b, i] = np.einsum("hkv,hk->hv", state, q[b, i] * scale)
        S[n] = state
    return o, S


def is_narrow_midpoint(y):
    """Whether the binary64 number y lies halfway between two neighbours of binary32, bfloat16 or
    binary16: the bits below the format's last significand bit are exactly 100...0 (normal range)."""
    if not math.isfinite(y) or y == 0:
        return False
    m, e = math.frexp(abs(y))  # y = m 2^e, m in [0.5, 1)
    for precision, emin in ((24, -126), (8, -126), (11, -14)):
        p = precision - max(0, emin - (e - 1))  # fewer bits where y is subnormal in the format
        scaled = math.ldexp(m, p + 1)  # the bit below the last kept one becomes the units bit
        if p >= 1 and scaled == math.floor(scaled) and int(scaled) % 2 == 1:
            return True
    return False


def metadata_agrees_with_data(meta, tensors):
    """What the metadata says about the data holds of the data (issue: documentation that disagreed
    with the data): the inputs it lists are exactly the file's inputs, cu_seqlens included (as I64);
    residual signs are recorded wherever decided, not only at narrow-format midpoints, and the
    metadata says so; the query scale is stated as the exact 1/sqrt(K)."""
    problems = []
    inputs = meta.get("inputs", {})
    outputs = meta.get("outputs", {})
    derived = set(meta.get("cotangents", {}))
    for name in outputs:
        derived |= {name, name + ".scale", name + ".bound", name + ".typical", name + ".residual_sign",
                    name + ".tc_bound", name + ".tc_operand_bound", name + ".tc_typical",
                    name + ".tc_typical_p11", name + ".tc_typical_f32",
                    name + ".chunked_bound", name + ".chunked_typical", name + ".chunked_operand_bound",
                    name + ".chunked_tc_typical", name + ".chunked_tc_typical_p11"}
    unlisted = sorted(set(tensors) - derived - set(inputs))
    if unlisted:
        problems.append(f"metadata inputs: the file has inputs the metadata does not list: {unlisted}")
    for name, info in inputs.items():
        if name not in tensors:
            problems.append(f"metadata inputs: lists {name}, which the file lacks")
        elif tensors[name].dtype != info.get("dtype"):
            problems.append(f"metadata inputs: {name} listed as {info.get('dtype')}, stored as {tensors[name].dtype}")
    beyond_midpoints = 0
    for name, info in outputs.items():
        signs, values = tensors.get(name + ".residual_sign"), tensors.get(name)
        if signs is None or values is None:
            continue
        for s, y in zip(signs.values.reshape(-1), values.values.reshape(-1)):
            beyond_midpoints += int(s != 0 and not is_narrow_midpoint(float(y)))
        if beyond_midpoints and "wherever decided" not in info.get("rounding", ""):
            problems.append(f"{name}: residual signs are stored away from narrow-format midpoints, but the "
                            f"metadata's rounding says: {info.get('rounding')!r}")
            break
    scale = meta.get("conventions", {}).get("query_scale", "")
    if scale.startswith("tau") and "exactly" not in scale:
        problems.append(f"query_scale: the data use the exact 1/sqrt(K), the metadata says {scale!r}")
    return problems


def compare(metadata_text, tensors, inspect, verbose=False):
    """Every mismatch between the library's view of the fixture and inspect's, as messages."""
    problems = []
    try:
        meta = json.loads(metadata_text)
    except ValueError as e:
        return [f"metadata['kalman_oracle'] is not JSON: {e}"]
    if not strict_equal(meta, inspect.get("metadata")):
        problems.append("metadata: the parsed metadata()['kalman_oracle'] differs from inspect's 'metadata'")

    listed = {entry.get("name"): entry for entry in inspect.get("tensors", [])}
    if len(listed) != len(inspect.get("tensors", [])):
        problems.append("inspect lists a tensor name twice")
    if set(listed) != set(tensors):
        problems.append(f"tensor names: only in the file {sorted(set(tensors) - set(listed))}, "
                        f"only in inspect {sorted(set(listed) - set(tensors), key=str)}")
    for name in sorted(set(listed) & set(tensors)):
        ours, theirs = tensors[name], listed[name]
        if ours.dtype != theirs.get("dtype"):
            problems.append(f"{name}: dtype {ours.dtype} here, {theirs.get('dtype')} in inspect")
        if list(ours.shape) != theirs.get("shape"):
            problems.append(f"{name}: shape {list(ours.shape)} here, {theirs.get('shape')} in inspect")
        digest = hashlib.sha256(ours.raw).hexdigest()
        if digest != theirs.get("sha256"):
            problems.append(f"{name}: sha256 {digest} here, {theirs.get('sha256')} in inspect")
        flat = ours.values.reshape(-1)
        first = theirs.get("first")
        want = min(8, flat.size)
        if not isinstance(first, list) or len(first) != want:
            problems.append(f"{name}: inspect's 'first' should hold {want} values, got {first!r}")
            continue
        integer = ours.dtype in INTEGER_DTYPES
        for i in range(want):
            if not same_value(flat[i], first[i], integer):
                problems.append(f"{name}: element {i} is {float(flat[i])!r} here ({float(flat[i]).hex()}), "
                                f"{first[i]!r} in inspect")

    problems += metadata_agrees_with_data(meta, tensors)

    if meta.get("model") == "gla":
        missing = [n for n in ("q", "k", "v", "g", "o", "final_state") if n not in tensors]
        if missing:
            problems.append(f"GLA model check: tensors {missing} missing")
        else:
            o, final_state = gla_numpy(tensors, meta)
            for name, ours in (("o", o), ("final_state", final_state)):
                fixture = tensors[name].values.astype(np.float64)
                if fixture.shape != ours.shape:
                    problems.append(f"GLA model check: {name} has shape {fixture.shape}, numpy gives {ours.shape}")
                    continue
                err = float(np.max(np.abs(ours - fixture)))
                bound = 1e-12 * float(np.max(np.abs(fixture)))
                if verbose:
                    print(f"  GLA model check: max |{name}_numpy - {name}_fixture| = {err:.3e} (bound 1e-12 max|{name}| = {bound:.3e})")
                if not err <= bound:
                    problems.append(f"GLA model check: max |{name}_numpy - {name}_fixture| = {err:.3e} > {bound:.3e}")
    return problems


def self_test(metadata_text, tensors, inspect):
    """The comparison must pass untouched and report every single corruption."""
    failures = []
    control = compare(metadata_text, tensors, inspect, verbose=True)
    if control:
        failures.append("control: the uncorrupted comparison already fails: " + "; ".join(control))

    def first_float_tensor():
        for i, entry in enumerate(inspect["tensors"]):
            if entry["dtype"] not in INTEGER_DTYPES and entry["first"] and isinstance(entry["first"][0], float):
                return i
        return None

    corruptions = []
    i = first_float_tensor()
    if i is not None:
        def nudge(j, i=i):
            x = j["tensors"][i]["first"][0]
            j["tensors"][i]["first"][0] = float(np.nextafter(x, np.inf))  # one ulp of binary64
        corruptions.append((f"first[0] of '{inspect['tensors'][i]['name']}' moved by one ulp", nudge))

    def flip_hash(j):
        h = j["tensors"][0]["sha256"]
        j["tensors"][0]["sha256"] = h[:-1] + ("1" if h[-1:] == "0" else "0")
    corruptions.append((f"last hex digit of the sha256 of '{inspect['tensors'][0]['name']}'", flip_hash))

    def change_dtype(j):
        j["tensors"][-1]["dtype"] = "F16" if j["tensors"][-1]["dtype"] != "F16" else "F32"
    corruptions.append((f"dtype of '{inspect['tensors'][-1]['name']}'", change_dtype))

    def change_shape(j):
        j["tensors"][0]["shape"][-1] += 1
    corruptions.append((f"last extent of the shape of '{inspect['tensors'][0]['name']}'", change_shape))

    def change_metadata(j):  # a nested number (the case's seed), else a top-level string
        case = j["metadata"].get("case")
        if isinstance(case, dict) and isinstance(case.get("seed"), int):
            case["seed"] += 1
        else:
            j["metadata"]["model"] = str(j["metadata"].get("model")) + "x"
    corruptions.append(("metadata case.seed + 1", change_metadata))

    if isinstance(inspect.get("metadata", {}).get("format_version"), int):
        def change_metadata_type(j):  # 1 -> 1.0: equal in Python, different JSON
            j["metadata"]["format_version"] = float(j["metadata"]["format_version"])
        corruptions.append(("metadata format_version written as a float", change_metadata_type))

    def rename(j):
        j["tensors"][1]["name"] += "_renamed"
    corruptions.append((f"name of '{inspect['tensors'][1]['name']}'", rename))

    for what, corrupt in corruptions:
        bad = copy.deepcopy(inspect)
        corrupt(bad)
        reported = compare(metadata_text, tensors, bad)
        print(f"  self-test: {what}: {'caught: ' + reported[0] if reported else 'NOT CAUGHT'}")
        if not reported:
            failures.append(f"corruption not caught: {what}")

    # The metadata-versus-data checks, each against the wording or listing it replaced.
    meta = json.loads(metadata_text)
    stale = []
    old_rounding = "binary64, round to nearest even; residual_sign = sign(exact - stored) at narrow-format midpoints"
    any_sign_away = any(
        int(s) != 0 and not is_narrow_midpoint(float(y))
        for name in meta.get("outputs", {})
        if name + ".residual_sign" in tensors
        for s, y in zip(tensors[name + ".residual_sign"].values.reshape(-1), tensors[name].values.reshape(-1)))
    if any_sign_away:
        stale.append(("the old residual_sign wording",
                      lambda m: [info.update(rounding=old_rounding) for info in m["outputs"].values()]))
    if str(meta.get("conventions", {}).get("query_scale", "")).startswith("tau"):
        stale.append(("the old query-scale wording",
                      lambda m: m["conventions"].update(query_scale="tau = 1/sqrt(K) = 16 ** -0.5, as fla")))
    if "cu_seqlens" in meta.get("inputs", {}):
        stale.append(("cu_seqlens left out of the metadata's inputs", lambda m: m["inputs"].pop("cu_seqlens")))
    for what, corrupt in stale:
        bad = copy.deepcopy(meta)
        corrupt(bad)
        reported = metadata_agrees_with_data(bad, tensors)
        print(f"  self-test: {what}: {'caught: ' + reported[0] if reported else 'NOT CAUGHT'}")
        if not reported:
            failures.append(f"metadata disagreement not caught: {what}")

    if json.loads(metadata_text).get("model") == "gla":
        # The model check itself: one element of the fixture's o off by 1e-9 max|o|.
        bad_tensors = dict(tensors)
        o = tensors["o"]
        values = o.values.copy()
        values.reshape(-1)[values.size // 2] += 1e-9 * float(np.max(np.abs(values)))
        bad_tensors["o"] = Tensor(o.dtype, o.shape, values, le_bytes(values))
        bad_inspect = copy.deepcopy(inspect)  # keep inspect consistent, so only the model check can object
        for entry in bad_inspect["tensors"]:
            if entry["name"] == "o":
                entry["sha256"] = hashlib.sha256(le_bytes(values)).hexdigest()
                entry["first"] = [float(x) for x in values.reshape(-1)[:len(entry["first"])]]
        reported = compare(metadata_text, bad_tensors, bad_inspect)
        model_reports = [r for r in reported if r.startswith("GLA model check")]
        print(f"  self-test: one element of o off by 1e-9 max|o|: {'caught: ' + model_reports[0] if model_reports else 'NOT CAUGHT'}")
        if not model_reports or len(model_reports) != len(reported):
            failures.append("the GLA model check did not catch a corrupted o (or something else objected): " + "; ".join(reported))
    return failures


def main(argv):
    args = argv[1:]
    selftest = bool(args) and args[0] == "--self-test"
    if selftest:
        args = args[1:]
    if len(args) != 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    fixture, inspect_path = args
    try:
        with open(inspect_path, encoding="utf-8") as f:
            inspect = json.load(f)
        metadata_text, tensors = load_fixture(fixture)
    except (OSError, ValueError, TypeError, KeyError) as e:
        print(f"read_fixture: {fixture}: {e}", file=sys.stderr)
        return 2
    if selftest:
        failures = self_test(metadata_text, tensors, inspect)
        for f in failures:
            print(f"read_fixture: SELF-TEST FAILED: {fixture}: {f}", file=sys.stderr)
        if not failures:
            print(f"read_fixture: self-test OK: {fixture}")
        return 1 if failures else 0
    problems = compare(metadata_text, tensors, inspect, verbose=True)
    for p in problems:
        print(f"read_fixture: MISMATCH: {fixture}: {p}", file=sys.stderr)
    if not problems:
        print(f"read_fixture: OK: {fixture} ({len(tensors)} tensors)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
