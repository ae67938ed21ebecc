"""KalmanOracle from Python: load a fixture, check an implementation's outputs against it.

    fx = kalman_oracle.load(path)                  # inputs, cotangents, metadata (numpy; torch=True)
    report = kalman_oracle.check(fx, {"o": o})     # the tool's `check --json`, as a CheckReport
    kalman_oracle.assert_conforms(fx, {"o": o})    # AssertionError with the tool's table on failure

The verdicts are the `kalman-oracle` tool's (docs/conformance.md): this package writes the candidate
file and runs `kalman-oracle check`. The tool is `tool=`, else $KALMAN_ORACLE_TOOL, else
`kalman-oracle` on PATH.
"""
import json
import os
import shutil
import subprocess
import tempfile

import numpy as np

from . import safetensors_file

__all__ = ["Fixture", "CheckReport", "ToolError", "load", "check", "assert_conforms", "find_tool"]
__version__ = "0.1.0"

METADATA_KEY = "kalman_oracle"


class ToolError(RuntimeError):
    """The tool could not check (bad input, exit 2, or it is missing): not a verdict."""


class Fixture:
    """One fixture: `inputs` and `cotangents` (name -> array; BF16 widened exactly to float32),
    `metadata` (the fixture's JSON metadata), `model`, `name`, `dtype` (the case's input dtype,
    e.g. "F32", "BF16"), `outputs` (name -> its metadata entry: kind, dtype, shape, optional), and
    `path`."""

    def __init__(self, path, inputs, cotangents, metadata):
        self.path = os.fspath(path)
        self.inputs = inputs
        self.cotangents = cotangents
        self.metadata = metadata
        self.model = metadata["model"]
        self.case = metadata["case"]
        self.name = self.case.get("name", os.path.basename(self.path))
        self.dtype = self.case.get("dtype")
        self.outputs = metadata["outputs"]

    def required_outputs(self):
        """The output names a complete candidate must hold (gradients are optional)."""
        return sorted(name for name, entry in self.outputs.items() if not entry.get("optional", False))

    def __repr__(self):
        return f"Fixture({self.name!r}, model={self.model!r}, dtype={self.dtype!r})"


def _as_array(dtype, stored, as_torch):
    if dtype == "BF16":
        values = safetensors_file.bfloat16_to_float32(stored)
        if as_torch:
            import torch  # optional dependency

            return torch.from_numpy(values.copy()).to(torch.bfloat16)  # exact: the values are bfloat16
        return values
    values = np.array(stored)  # a writable copy
    if as_torch:
        import torch

        return torch.from_numpy(values)
    return values


def load(path, torch=False):
    """Reads a fixture: its inputs and cotangents as numpy arrays (torch tensors with torch=True;
    BF16 inputs then come back as torch.bfloat16), and its metadata."""
    tensors, header_metadata = safetensors_file.read(path)
    if METADATA_KEY not in header_metadata:
        raise ValueError(f"{path}: no '{METADATA_KEY}' metadata: not a KalmanOracle fixture")
    metadata = json.loads(header_metadata[METADATA_KEY])
    arrays = {}
    for group in ("inputs", "cotangents"):
        arrays[group] = {}
        for name in metadata.get(group, {}):
            if name not in tensors:
                raise ValueError(f"{path}: the metadata lists {group[:-1]} {name} but the file has no such tensor")
            dtype, _, stored = tensors[name]
            arrays[group][name] = _as_array(dtype, stored, torch)
    return Fixture(path, arrays["inputs"], arrays["cotangents"], metadata)


def find_tool(tool=None):
    """The kalman-oracle executable: `tool`, else $KALMAN_ORACLE_TOOL, else `kalman-oracle` on PATH."""
    candidate = tool or os.environ.get("KALMAN_ORACLE_TOOL") or shutil.which("kalman-oracle")
    if not candidate or not os.path.isfile(candidate) or not os.access(candidate, os.X_OK):
        raise ToolError("the kalman-oracle tool was not found: put it on PATH, set KALMAN_ORACLE_TOOL, or pass tool=")
    return candidate


class CheckReport:
    """The tool's verdict on one candidate: `passed` (every checked output within its budget; with
    strict=True a SUSPECT or UNVERIFIED output fails too), `outputs` (name -> the tool's JSON entry: verdict,
    max_error, budget, worst element, ...), `json` (the whole report) and `table` (the tool's table,
    as printed without --json)."""

    def __init__(self, passed, report, table):
        self.passed = passed
        self.json = report
        self.outputs = {entry["name"]: entry for entry in report.get("outputs", [])}
        self.table = table

    def __bool__(self):
        return self.passed

    def __repr__(self):
        return f"CheckReport(passed={self.passed}, outputs={sorted(self.outputs)})"


def _numpy(value):
    if hasattr(value, "detach"):  # a torch tensor, without importing torch
        value = value.detach().cpu()
        if str(value.dtype) == "torch.bfloat16":
            value = value.float()
        value = value.numpy()
    array = np.asarray(value)
    if array.dtype == np.float64 or array.dtype == np.float32 or array.dtype == np.float16:
        return array
    raise TypeError(f"an output of dtype {array.dtype}: give float64, float32 or float16 values")


def check(fixture, outputs, arithmetic=None, strict=False, tool=None):
    """Checks `outputs` ({name: array or torch tensor}, named as the fixture's outputs) against
    `fixture` (a Fixture or a path) with `kalman-oracle check`. Float32 outputs are written as F32,
    float64 as F64, float16 as F16 (bfloat16 tensors are widened to F32: exact). A candidate
    missing a required output is checked as a partial one (`--outputs`, the report lists what it
    omitted). `arithmetic` (the tool's --arithmetic: "f32", "f32-fma", "f64", "bf16-tc", ...)
    overrides the default taken from the dtype. Raises ToolError when the tool rejects the input
    (exit 2) or is missing."""
    if not isinstance(fixture, Fixture):
        fixture = load(fixture)
    executable = find_tool(tool)
    arrays = {name: _numpy(value) for name, value in outputs.items()}
    unknown = sorted(set(arrays) - set(fixture.outputs))
    if unknown:
        raise ToolError(f"{fixture.name}: outputs {unknown} are not outputs of this fixture "
                        f"(it has {sorted(fixture.outputs)})")
    options = []
    if set(fixture.required_outputs()) - set(arrays):
        options += ["--outputs", ",".join(sorted(arrays))]
    if arithmetic:
        options += ["--arithmetic", arithmetic]
    if strict:
        options.append("--strict")
    with tempfile.TemporaryDirectory(prefix="kalman-oracle-check.") as scratch:
        candidate = os.path.join(scratch, "candidate.safetensors")
        safetensors_file.write(candidate, arrays)
        command = [executable, "check", fixture.path, candidate] + options
        as_json = subprocess.run(command + ["--json"], capture_output=True, text=True)
        if as_json.returncode not in (0, 1):
            raise ToolError(f"kalman-oracle check exited {as_json.returncode}: {as_json.stderr.strip()}")
        table = subprocess.run(command, capture_output=True, text=True).stdout
    return CheckReport(as_json.returncode == 0, json.loads(as_json.stdout), table)


def assert_conforms(fixture, outputs, **options):
    """check(), raising AssertionError with the tool's table when the candidate fails."""
    report = check(fixture, outputs, **options)
    if not report.passed:
        name = fixture.name if isinstance(fixture, Fixture) else os.fspath(fixture)
        raise AssertionError(f"{name}: the implementation fails its fixture\n{report.table}")
    return report
