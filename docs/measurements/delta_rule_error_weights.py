#!/usr/bin/env python3
# How much could a better propagation bound gain on the delta rule without decay at long lengths?
# (docs/error-model.md, "What a bound of this shape could gain"; issue: the DeltaNet dβ budgets at
# K = 128, T = 4096 and 16384 that exceed their scale.)
#
#   python3 delta_rule_error_weights.py K T SEGMENT BLOCK [SEED]      (needs numpy)
#
# DeltaNet's exact step A_t = I − β_t k_t k_tᵀ with the production shapes' inputs (`validate`: unit keys,
# uniform entries in [−1, 1] normalised; β uniform in [0, 1]). A local error of norm 1 enters after every
# token; the state's error at the last token T is Σ_s Φ(T, s) ℓ_s, Φ(T, s) = A_T ⋯ A_{s+1}. Printed, as
# the weight that the bound puts on the T + 1 unit locals together:
#   - the carry-only segments of check/two_key_propagation.hpp (K > 32): inside a segment each local weighs
#     1 (Π ρ, ρ = 1), the carried error min(1, ‖Φ‖_F); at a segment's close the carry by its spectral norm
#     (here the exact one; the code's estimate is within 1.07 above it);
#   - blocks of BLOCK tokens, each weighted by min(1, ‖Φ(T, block end)‖_F) (a cheaper refinement);
#   - the best bound of this shape: every local weighted by the exact ‖Φ(T, s)‖₂ (no worst-case bound
#     that propagates each local's norm through the steps can put less on them);
#   - a random walk: sqrt(Σ_s ‖Φ(T, s)‖_F² / K), the root mean square of the error when the locals point
#     in independent uniformly random directions;
# and how many tokens it takes the keys to contract every direction (‖Φ‖₂ < 1/2, ‖Φ‖_F < 1).
import sys

import numpy as np

K, T, segment, block = (int(a) for a in sys.argv[1:5])
seed = int(sys.argv[5]) if len(sys.argv) > 5 else 1
rng = np.random.default_rng(seed)
k = rng.uniform(-1, 1, (T + 1, K))
k /= np.linalg.norm(k, axis=1, keepdims=True)
beta = rng.uniform(0, 1, T + 1)


def step_left(P, r):  # A_r P
    return P - beta[r] * np.outer(k[r], k[r] @ P)


# ‖Φ(T, s)‖₂ and ‖Φ(T, s)‖_F for every s, Φ grown on the right from Φ(T, T) = I.
spectral, frobenius = np.empty(T + 1), np.empty(T + 1)
Psi = np.eye(K)
spectral[T], frobenius[T] = 1.0, np.sqrt(K)
for s in range(T - 1, -1, -1):
    Psi = Psi - beta[s + 1] * np.outer(Psi @ k[s + 1], k[s + 1])  # Ψ A_{s+1}
    spectral[s], frobenius[s] = np.linalg.norm(Psi, 2), np.linalg.norm(Psi)


def carry_only(t):
    bound, t0 = 0.0, 0
    while t0 + segment <= t:
        P = np.eye(K)
        for r in range(t0 + 1, t0 + segment + 1):
            P = step_left(P, r)
        bound, t0 = np.linalg.norm(P, 2) * bound + segment, t0 + segment
    P = np.eye(K)
    for r in range(t0 + 1, t + 1):
        P = step_left(P, r)
    return min(1.0, np.linalg.norm(P)) * bound + (t - t0)


blocks = sum(min(1.0, frobenius[b]) * block for b in range(block - 1, T + 1, block))
print(f"K={K} T={T} segment={segment} seed={seed}: carry-only segments {carry_only(T):.0f}; blocks of {block} "
      f"with Frobenius weights {blocks:.0f}; best of this shape (exact spectral weights) {spectral.sum():.1f}; "
      f"random walk {np.sqrt((frobenius**2).sum() / K):.2f}; tokens until ||Phi||_2 < 1/2: "
      f"{int(np.argmax(spectral[::-1] < 0.5))}, until ||Phi||_F < 1: {int(np.argmax(frobenius[::-1] < 1))}")
