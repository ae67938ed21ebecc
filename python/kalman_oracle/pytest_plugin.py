"""The pytest plugin (installed with the package; docs/conformance.md, "From Python and pytest").

    pytest --kalman-oracle-suite DIR [--kalman-oracle-models gla,kda] [--kalman-oracle-dtypes F32]
           [--kalman-oracle-tool PATH]

parametrises every test that takes the `kalman_oracle_fixture` argument over the suite's fixtures
(a kalman_oracle.Fixture each; test ids are the fixture names). A test narrows its own selection
with the marker `@pytest.mark.kalman_oracle(models=[...], dtypes=[...])`. Without
--kalman-oracle-suite such tests are skipped with a message saying so.
"""
import glob
import json
import os

import pytest

import kalman_oracle
from kalman_oracle import safetensors_file


def pytest_addoption(parser):
    group = parser.getgroup("kalman-oracle")
    group.addoption("--kalman-oracle-suite", metavar="DIR", help="directory of KalmanOracle fixtures")
    group.addoption("--kalman-oracle-models", metavar="M,...", help="only fixtures of these models")
    group.addoption("--kalman-oracle-dtypes", metavar="D,...", help="only fixtures of these input dtypes")
    group.addoption("--kalman-oracle-tool", metavar="PATH", help="the kalman-oracle executable")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "kalman_oracle(models=None, dtypes=None): the fixtures a test takes (by model and input dtype)")
    tool = config.getoption("--kalman-oracle-tool")
    if tool:
        os.environ["KALMAN_ORACLE_TOOL"] = os.path.abspath(tool)


def _split(text):
    return {item.strip() for item in text.split(",") if item.strip()} if text else None


def pytest_generate_tests(metafunc):
    if "kalman_oracle_fixture" not in metafunc.fixturenames:
        return
    suite = metafunc.config.getoption("--kalman-oracle-suite")
    if not suite:
        metafunc.parametrize("kalman_oracle_fixture", [
            pytest.param(None, marks=pytest.mark.skip(reason="no --kalman-oracle-suite given"))])
        return
    paths = sorted(glob.glob(os.path.join(suite, "*.safetensors")))
    if not paths:
        raise pytest.UsageError(f"--kalman-oracle-suite {suite}: no *.safetensors fixtures there")
    models, dtypes = _split(metafunc.config.getoption("--kalman-oracle-models")), _split(
        metafunc.config.getoption("--kalman-oracle-dtypes"))
    marker = metafunc.definition.get_closest_marker("kalman_oracle")
    if marker:
        if marker.kwargs.get("models"):
            models = set(marker.kwargs["models"]) & models if models else set(marker.kwargs["models"])
        if marker.kwargs.get("dtypes"):
            dtypes = set(marker.kwargs["dtypes"]) & dtypes if dtypes else set(marker.kwargs["dtypes"])
    selected = []
    for path in paths:
        # Select on the header's metadata; load (every tensor) only the fixtures selected.
        metadata = json.loads(safetensors_file.read_metadata(path).get(kalman_oracle.METADATA_KEY, "{}"))
        case = metadata.get("case", {})
        if models is not None and metadata.get("model") not in models:
            continue
        if dtypes is not None and case.get("dtype") not in dtypes:
            continue
        fixture = kalman_oracle.load(path)
        selected.append(pytest.param(fixture, id=fixture.name))
    if not selected:
        selected = [pytest.param(None, marks=pytest.mark.skip(reason=f"no fixture in {suite} matches"))]
    metafunc.parametrize("kalman_oracle_fixture", selected)
