"""The package's own tests (label python): load, check, assert_conforms and the plugin's selection.
The tool is $KALMAN_ORACLE_TOOL; the golden suite is $KALMAN_ORACLE_GOLDEN (python/run_tests.sh sets
both)."""
import json
import os
import subprocess

import numpy as np
import pytest

import kalman_oracle
from kalman_oracle import safetensors_file

GOLDEN = os.environ.get("KALMAN_ORACLE_GOLDEN", "")
TOOL = os.environ.get("KALMAN_ORACLE_TOOL", "")
pytestmark = pytest.mark.skipif(not (GOLDEN and TOOL), reason="KALMAN_ORACLE_GOLDEN and KALMAN_ORACLE_TOOL unset")


def golden(name):
    return os.path.join(GOLDEN, name + ".safetensors")


def inspect(path):
    return json.loads(subprocess.run([TOOL, "inspect", "--json", path], check=True, capture_output=True,
                                     text=True).stdout)


@pytest.mark.parametrize("name", ["gla_f32_small", "delta_net_bf16_small", "kla_f32_small", "gdn_f32_varlen"])
def test_load_reads_what_inspect_lists(name):
    fx = kalman_oracle.load(golden(name))
    listed = {t["name"]: t for t in inspect(golden(name))["tensors"]}
    assert fx.model == fx.metadata["model"] and fx.name == name
    for group in (fx.inputs, fx.cotangents):
        for tensor, values in group.items():
            assert list(values.shape) == listed[tensor]["shape"], tensor
            # The first values, exactly (BF16 widened to float32 is exact).
            first = [float(x) for x in np.asarray(values, dtype=np.float64).reshape(-1)[:8]]
            assert first == listed[tensor]["first"], tensor


def test_bf16_inputs_widen_exactly():
    fx = kalman_oracle.load(golden("delta_net_bf16_small"))
    q = fx.inputs["q"]
    assert q.dtype == np.float32
    # Every value is a bfloat16: its low 16 bits are zero.
    assert not np.any(q.view(np.uint32) & 0xFFFF)


def reference_outputs(name, tmp_path):
    """The reference in binary32 (`kalman-oracle run`), as {name: float32 array}."""
    out = tmp_path / "run.safetensors"
    subprocess.run([TOOL, "run", golden(name), str(out)], check=True)
    tensors, _ = safetensors_file.read(str(out))
    return {n: np.array(a) for n, (_, _, a) in tensors.items()}


def test_check_passes_the_reference_and_fails_a_perturbed_output(tmp_path):
    fx = kalman_oracle.load(golden("gla_f32_small"))
    outputs = reference_outputs("gla_f32_small", tmp_path)
    report = kalman_oracle.check(fx, outputs)
    assert report.passed and report.outputs["o"]["verdict"] == "PASS"
    bad = dict(outputs)
    bad["o"] = outputs["o"] * np.float32(1 + 1e-3)
    report = kalman_oracle.check(fx, bad)
    assert not report.passed and report.outputs["o"]["verdict"] == "FAIL"
    assert "FAIL" in report.table
    with pytest.raises(AssertionError, match="fails its fixture"):
        kalman_oracle.assert_conforms(fx, bad)


def test_a_partial_candidate_lists_what_it_omitted(tmp_path):
    fx = kalman_oracle.load(golden("gla_f32_small"))
    outputs = reference_outputs("gla_f32_small", tmp_path)
    report = kalman_oracle.check(fx, {"o": outputs["o"]})
    assert report.passed and "final_state" in report.json["omitted"]


def test_bad_input_is_a_tool_error_not_a_verdict(tmp_path):
    fx = kalman_oracle.load(golden("gla_f32_small"))
    with pytest.raises(kalman_oracle.ToolError, match="not outputs of this fixture"):
        kalman_oracle.check(fx, {"y": np.zeros(3, np.float32)})
    with pytest.raises(kalman_oracle.ToolError, match="exited 2"):
        kalman_oracle.check(fx, {"o": np.zeros(3, np.float32)})  # wrong shape: the tool refuses it
    with pytest.raises(kalman_oracle.ToolError, match="not found"):
        kalman_oracle.check(fx, {"o": np.zeros(3, np.float32)}, tool=str(tmp_path / "missing"))


def test_written_candidates_round_trip(tmp_path):
    arrays = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array([1.5, -2.0]),
              "c": np.array([7], dtype=np.int64)}
    path = str(tmp_path / "x.safetensors")
    safetensors_file.write(path, arrays)
    tensors, _ = safetensors_file.read(path)
    for name, array in arrays.items():
        dtype, shape, stored = tensors[name]
        assert shape == array.shape and np.array_equal(stored, array), name
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".candidate.")]  # no temporary left


def test_the_plugin_selects_by_model_and_dtype(pytester):
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.kalman_oracle(models=["gla", "delta_net"])
        def test_selected(kalman_oracle_fixture):
            assert kalman_oracle_fixture.model in ("gla", "delta_net")
        """)
    result = pytester.runpytest("--kalman-oracle-suite", GOLDEN,
                                "--kalman-oracle-dtypes", "F32", "-v")
    result.assert_outcomes(passed=2)  # gla_f32_small, gla_f32_positive (delta_net's golden case is BF16)
    result = pytester.runpytest("-v")
    result.assert_outcomes(skipped=1)
