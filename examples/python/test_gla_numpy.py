"""An implementation tested with the pytest plugin: gated linear attention (GLA) in plain numpy,
binary32, sequential, fla's conventions (docs/math.md, "GLA"), against every GLA fixture of a suite:

    pip install ./python pytest
    pytest examples/python --kalman-oracle-suite fixtures/golden

With KALMAN_ORACLE_EXAMPLE_BUG=1 the implementation reads its state before the write (o_t from
S_{t-1}), and the test fails with the tool's table: the check has teeth.
"""
import os

import numpy as np
import pytest

import kalman_oracle

READ_BEFORE_WRITE = os.environ.get("KALMAN_ORACLE_EXAMPLE_BUG") == "1"


def gla(q, k, v, g, initial_state=None, cu_seqlens=None):
    """o_t = S_tᵀ (τ q_t), S_t = diag(e^{g_t}) S_{t-1} + k_t v_tᵀ per (sequence, value head), τ = 1/√K,
    in float32; value head j reads query/key head j // (HV / H). Returns (o, final_state)."""
    q, k, v, g = (np.asarray(x, dtype=np.float32) for x in (q, k, v, g))
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    groups = HV // H
    q, k, g = (np.repeat(x, groups, axis=2) if x.shape[2] == H else x for x in (q, k, g))
    if cu_seqlens is not None:
        cu = [int(x) for x in np.asarray(cu_seqlens).reshape(-1)]
        sequences = [(0, cu[i], cu[i + 1]) for i in range(len(cu) - 1)]
    else:
        sequences = [(b, 0, T) for b in range(B)]
    states = (np.zeros((len(sequences), HV, K, V), np.float32) if initial_state is None
              else np.array(initial_state, dtype=np.float32))
    scale = np.float32(1.0 / np.sqrt(K))
    o = np.zeros((B, T, HV, V), np.float32)
    for n, (b, begin, end) in enumerate(sequences):
        state = states[n]
        for t in range(begin, end):
            previous = state
            state = np.exp(g[b, t])[:, :, None] * state + k[b, t][:, :, None] * v[b, t][:, None, :]
            read = previous if READ_BEFORE_WRITE else state
            o[b, t] = np.einsum("hkv,hk->hv", read, q[b, t] * scale)
        states[n] = state
    return o, states


@pytest.mark.kalman_oracle(models=["gla"])
def test_gla_conforms(kalman_oracle_fixture):
    fx = kalman_oracle_fixture
    o, final_state = gla(**fx.inputs)
    kalman_oracle.assert_conforms(fx, {"o": o, "final_state": final_state})
