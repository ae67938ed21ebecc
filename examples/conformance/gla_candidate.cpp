// gla_candidate FIXTURE OUTPUT: a plain fp32 implementation of Gated Linear Attention (GLA), the
// "implementation under test" of this example. It follows the conformance file protocol of
// `kalman-oracle conform`: read the inputs from the fixture, write the outputs (o, final_state)
// under the fixture's names to OUTPUT.
//
// Written from the formula alone (fla conventions), not from the reference models: per sequence n
// and value head h (query/key head h / (HV / H) when the value heads are grouped),
//
//   S = S_0                                   (initial_state[n, h], K x V; zero when absent)
//   for each token t:
//     S   = diag(exp(g_t)) S + k_t v_tᵀ        (g: log gates, [B, T, HV, K])
//     o_t = Sᵀ (q_t * K^-1/2)                  (read after write; q, k: [B, T, H, K]; v, o: [B, T, HV, V])
//
// Every operation is in float (binary32); the outputs are written as F32. Varlen fixtures (a
// "cu_seqlens" tensor, B = 1) are split into their sequences, one state each.
//
// Exit status: 0 written, 2 the fixture is not a GLA fixture this program understands.
#include <kalman_oracle/io/safetensors.hpp>

#include <cmath>
#include <cstdint>
#include <exception>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace st = kalman_oracle::safetensors;

namespace {

[[noreturn]] void refuse(const std::string& why) { throw std::runtime_error(why); }

/// A tensor's elements as float; the inputs of an fp32 implementation are F32 (or narrower: BF16
/// and F16 widen exactly). F64 inputs are rounded to float, as a float kernel would read them.
std::vector<float> as_floats(const st::tensor_entry& t) {
  const std::vector<double> d = st::to_doubles(t);
  return std::vector<float>(d.begin(), d.end());
}

void require_shape(const st::tensor_entry& t, const kalman_oracle::shape_t& want) {
  if (t.shape != want)
    refuse("tensor '" + t.name + "' has shape " + kalman_oracle::to_string(t.shape) + ", expected " +
           kalman_oracle::to_string(want));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: gla_candidate FIXTURE OUTPUT\n";
    return 2;
  }
  const std::string fixture_path = argv[1], output_path = argv[2];
  try {
    const st::file in = st::read(fixture_path);
    const st::tensor_entry& q_t = in.at("q", fixture_path);
    const st::tensor_entry& k_t = in.at("k", fixture_path);
    const st::tensor_entry& v_t = in.at("v", fixture_path);
    const st::tensor_entry& g_t = in.at("g", fixture_path);
    if (q_t.shape.size() != 4 || v_t.shape.size() != 4) refuse("q and v must have 4 axes [B, T, H, D]");
    const std::size_t B = q_t.shape[0], T = q_t.shape[1], H = q_t.shape[2], K = q_t.shape[3];
    const std::size_t HV = v_t.shape[2], V = v_t.shape[3];
    if (H == 0 || HV % H != 0) refuse("the value heads HV must be a multiple of the query/key heads H");
    require_shape(k_t, {B, T, H, K});
    require_shape(v_t, {B, T, HV, V});
    require_shape(g_t, {B, T, HV, K});

    // Sequences: [begin, end) token ranges of batch row b; varlen packs them into row 0.
    struct sequence {
      std::size_t b, begin, end;
    };
    std::vector<sequence> sequences;
    if (const st::tensor_entry* cu = in.find("cu_seqlens")) {
      if (B != 1) refuse("cu_seqlens needs B = 1");
      const std::vector<std::int64_t> offsets = st::to_int64s(*cu);
      if (offsets.size() < 2 || offsets.front() != 0 || offsets.back() != static_cast<std::int64_t>(T))
        refuse("cu_seqlens must run from 0 to T");
      for (std::size_t i = 0; i + 1 < offsets.size(); ++i) {
        if (offsets[i + 1] < offsets[i]) refuse("cu_seqlens must not decrease");
        sequences.push_back({0, static_cast<std::size_t>(offsets[i]), static_cast<std::size_t>(offsets[i + 1])});
      }
    } else {
      for (std::size_t b = 0; b < B; ++b) sequences.push_back({b, 0, T});
    }
    const std::size_t N = sequences.size();

    const std::vector<float> q = as_floats(q_t), k = as_floats(k_t), v = as_floats(v_t), g = as_floats(g_t);
    std::vector<float> state(N * HV * K * V, 0.0f);  // [N, HV, K, V]; starts as S_0
    if (const st::tensor_entry* s0 = in.find("initial_state")) {
      require_shape(*s0, {N, HV, K, V});
      state = as_floats(*s0);
    }
    std::vector<float> o(B * T * HV * V, 0.0f);

    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(K)));  // K ** -0.5, rounded once
    const std::size_t group = HV / H;
    std::vector<float> qs(K), decay(K);
    for (std::size_t n = 0; n < N; ++n) {
      const sequence& seq = sequences[n];
      for (std::size_t h = 0; h < HV; ++h) {
        const std::size_t hq = h / group;  // the query/key head this value head reads
        float* S = &state[(n * HV + h) * K * V];
        for (std::size_t t = seq.begin; t < seq.end; ++t) {
          const float* qt = &q[((seq.b * T + t) * H + hq) * K];
          const float* kt = &k[((seq.b * T + t) * H + hq) * K];
          const float* vt = &v[((seq.b * T + t) * HV + h) * V];
          const float* gt = &g[((seq.b * T + t) * HV + h) * K];
          // S = diag(exp(g_t)) S + k_t v_tᵀ
          for (std::size_t i = 0; i < K; ++i) decay[i] = std::exp(gt[i]);
          for (std::size_t i = 0; i < K; ++i)
            for (std::size_t j = 0; j < V; ++j) S[i * V + j] = decay[i] * S[i * V + j] + kt[i] * vt[j];
          // o_t = Sᵀ (q_t * scale)
          for (std::size_t i = 0; i < K; ++i) qs[i] = qt[i] * scale;
          float* ot = &o[((seq.b * T + t) * HV + h) * V];
          for (std::size_t j = 0; j < V; ++j) {
            float acc = 0.0f;
            for (std::size_t i = 0; i < K; ++i) acc += S[i * V + j] * qs[i];
            ot[j] = acc;
          }
        }
      }
    }

    st::file out;
    out.tensors.push_back(st::make_f32("o", {B, T, HV, V}, o));
    out.tensors.push_back(st::make_f32("final_state", {N, HV, K, V}, state));
    st::write_atomic(output_path, out);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "gla_candidate: " << fixture_path << ": " << e.what() << "\n";
    return 2;
  }
}
