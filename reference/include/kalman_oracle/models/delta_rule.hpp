// The memory updates shared by the fixed-gain family and the KDN memories (docs/math.md §2, §4, §5, §7),
// on one head's state S (K x V, key rows, value columns, row-major in a span of K*V values).
//
// The order is fla's: decay first, then the delta correction against the *decayed* state, then the
// read (read after write):
//   S <- diag(alpha) S;  S <- S + kappa (v - S^T k)^T;  o = S^T (tau q)
// which is S_t = (I - kappa k^T) diag(alpha) S_{t-1} + kappa v^T. With kappa = beta k it is the
// DeltaNet/GDN/KDA rule; with kappa the diagonal-KDN gain it is the two-key rule of §7 (the erase
// direction stays k).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace kalman_oracle {

/// S <- diag(alpha) S (row i scaled by alpha_i).
template <class T>
void decay_rows(std::span<T> state, std::size_t value_dim, std::span<const T> alpha) {
  for (std::size_t i = 0; i < alpha.size(); ++i)
    for (std::size_t j = 0; j < value_dim; ++j) state[i * value_dim + j] *= alpha[i];
}

/// S <- alpha S (scalar decay, GDN).
template <class T>
void decay_all(std::span<T> state, const T& alpha) {
  for (T& s : state) s *= alpha;
}

/// S^T k: the memory's prediction of the value at key k.
template <class T>
std::vector<T> predict_value(std::span<const T> state, std::size_t value_dim, std::span<const T> key) {
  std::vector<T> out(value_dim, T(0));
  for (std::size_t i = 0; i < key.size(); ++i)
    for (std::size_t j = 0; j < value_dim; ++j) out[j] += state[i * value_dim + j] * key[i];
  return out;
}

/// S <- S + gain (v - S^T k)^T: the delta correction (erase along k, write along gain).
template <class T>
void delta_write(std::span<T> state, std::span<const T> key, std::span<const T> gain, std::span<const T> value) {
  const std::size_t value_dim = value.size();
  const std::vector<T> predicted = predict_value<T>(state, value_dim, key);
  for (std::size_t i = 0; i < gain.size(); ++i)
    for (std::size_t j = 0; j < value_dim; ++j) state[i * value_dim + j] += gain[i] * (value[j] - predicted[j]);
}

/// S <- S + k v^T (GLA's write, no erase).
template <class T>
void outer_write(std::span<T> state, std::span<const T> key, std::span<const T> value) {
  const std::size_t value_dim = value.size();
  for (std::size_t i = 0; i < key.size(); ++i)
    for (std::size_t j = 0; j < value_dim; ++j) state[i * value_dim + j] += key[i] * value[j];
}

/// o = S^T (scale q).
template <class T>
void read_state(std::span<const T> state, std::span<const T> query, const T& scale, std::span<T> out) {
  const std::size_t value_dim = out.size();
  for (std::size_t j = 0; j < value_dim; ++j) out[j] = T(0);
  for (std::size_t i = 0; i < query.size(); ++i) {
    const T sq = scale * query[i];
    for (std::size_t j = 0; j < value_dim; ++j) out[j] += state[i * value_dim + j] * sq;
  }
}

}  // namespace kalman_oracle
