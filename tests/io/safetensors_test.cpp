// The safetensors reader and writer: round trips of every dtype, the exact bytes of a hand-built
// file, one test per validation rule (each checks the message names the tensor and the rule), the
// atomic write, and a file written by Python's safetensors.
#include "kalman_oracle/io/safetensors.hpp"

#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#include "kalman_oracle/scalar/rounding.hpp"

using namespace kalman_oracle;
namespace st = kalman_oracle::safetensors;
namespace fs = std::filesystem;

namespace {

/// A raw file: the 8-byte little-endian length of `header`, `header`, then `data`.
std::vector<std::uint8_t> raw(const std::string& header, const std::vector<std::uint8_t>& data = {}) {
  std::vector<std::uint8_t> out;
  for (int i = 0; i < 8; ++i)
    out.push_back(static_cast<std::uint8_t>(static_cast<std::uint64_t>(header.size()) >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

/// A file whose 8-byte length field says `n`, followed by `rest`.
std::vector<std::uint8_t> with_length(std::uint64_t n, const std::string& rest) {
  std::vector<std::uint8_t> out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::uint8_t>(n >> (8 * i)));
  out.insert(out.end(), rest.begin(), rest.end());
  return out;
}

/// One tensor entry of a header, as JSON text.
std::string entry(const std::string& name, const std::string& dtype, const std::string& shape,
                  const std::string& offsets) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":" + offsets + "}";
}

st::file parse(const std::vector<std::uint8_t>& bytes) { return st::parse(bytes, "t.st"); }

std::uint64_t bits_of(double d) { return std::bit_cast<std::uint64_t>(d); }

st::file round_trip(const st::file& f) { return st::parse(st::serialise(f), "round trip"); }

/// A fresh, empty directory for one test (the pid keeps concurrent test runs apart).
fs::path scratch_dir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("kalman_oracle_safetensors_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::vector<std::string> listing(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST_CASE("safetensors: dtype names, sizes and parsing") {
  using st::dtype;
  for (dtype t : {dtype::f64, dtype::f32, dtype::f16, dtype::bf16, dtype::i64, dtype::i32, dtype::i8, dtype::u8})
    CHECK(st::parse_dtype(st::dtype_name(t)) == t);
  CHECK(st::dtype_name(dtype::bf16) == "BF16");
  CHECK(st::dtype_size(dtype::f64) == 8);
  CHECK(st::dtype_size(dtype::i32) == 4);
  CHECK(st::dtype_size(dtype::f16) == 2);
  CHECK(st::dtype_size(dtype::bf16) == 2);
  CHECK(st::dtype_size(dtype::u8) == 1);
  CHECK_FALSE(st::parse_dtype("F8_E4M3").has_value());
  CHECK_FALSE(st::parse_dtype("f32").has_value());  // names are case-sensitive
  CHECK_FALSE(st::parse_dtype("").has_value());
}

TEST_CASE("safetensors: F64 round trip keeps -0, subnormals, infinities and NaN payloads") {
  const std::vector<double> v{1.0,
                              -0.0,
                              std::numeric_limits<double>::denorm_min(),
                              -std::numeric_limits<double>::denorm_min() * 3,
                              std::numeric_limits<double>::infinity(),
                              -std::numeric_limits<double>::infinity(),
                              std::bit_cast<double>(std::uint64_t{0x7FF0000000000001}),  // signalling NaN, payload 1
                              std::bit_cast<double>(std::uint64_t{0xFFF8000000000123}),  // negative quiet NaN
                              0.1};
  st::file f;
  f.tensors.push_back(st::make_f64("x", {3, 3}, v));
  const st::file g = round_trip(f);
  CHECK(g == f);
  const std::vector<double> back = st::to_doubles(g.at("x", "g"));
  REQUIRE(back.size() == v.size());
  for (std::size_t i = 0; i < v.size(); ++i) CHECK(bits_of(back[i]) == bits_of(v[i]));
  // Little-endian in the file: 1.0 is 0x3FF0000000000000.
  CHECK(g.tensors[0].bytes[7] == 0x3F);
  CHECK(g.tensors[0].bytes[6] == 0xF0);
}

TEST_CASE("safetensors: F32 round trip and exact widening") {
  const std::vector<std::uint32_t> patterns{0x3F800000, 0x80000000, 0x00000001, 0x807FFFFF, 0x00800000,
                                            0x7F7FFFFF, 0x7F800000, 0xFF800000, 0x7F800001, 0xFFC00123};
  std::vector<float> v;
  for (std::uint32_t p : patterns) v.push_back(std::bit_cast<float>(p));
  st::file f;
  f.tensors.push_back(st::make_f32("s", {10}, v));
  const st::file g = round_trip(f);
  CHECK(g == f);
  for (std::size_t i = 0; i < patterns.size(); ++i) {
    std::uint32_t stored = 0;
    for (int b = 0; b < 4; ++b) stored |= std::uint32_t{g.tensors[0].bytes[4 * i + b]} << (8 * b);
    CHECK(stored == patterns[i]);  // NaN payloads (and the signalling bit) survive the file
  }
  const std::vector<double> d = st::to_doubles(g.tensors[0]);
  CHECK(d[0] == 1.0);
  CHECK(bits_of(d[1]) == bits_of(-0.0));
  CHECK(d[2] == std::ldexp(1.0, -149));  // smallest subnormal, exact
  CHECK(d[3] == -std::ldexp(double(0x7FFFFF), -149));
  CHECK(d[5] == double(std::numeric_limits<float>::max()));
  CHECK(d[6] == std::numeric_limits<double>::infinity());
  // NaN: payload moved to the top of double's fraction, the signalling bit not set.
  CHECK(bits_of(d[8]) == 0x7FF0000020000000);
  CHECK(bits_of(d[9]) == 0xFFF8002460000000);
  // Every non-NaN pattern on a stride through all 2^32 agrees with the hardware widening.
  int checked = 0;
  for (std::uint64_t p = 0; p <= 0xFFFFFFFF; p += 65521) {
    const auto bits = static_cast<std::uint32_t>(p);
    const float x = std::bit_cast<float>(bits);
    if (std::isnan(x)) continue;
    const st::tensor_entry e = st::make_f32("p", {}, std::vector<float>{x});
    const double got = st::to_doubles(e)[0];
    if (bits_of(got) != bits_of(static_cast<double>(x))) {
      FAIL_CHECK("F32 pattern ", bits, " decodes to ", got);
      break;
    }
    ++checked;
  }
  CHECK(checked > 60000);
}

TEST_CASE("safetensors: F16 and BF16 decode every pattern exactly (checked against rounding.hpp's MPFR decoder)") {
  // rounding.hpp's from_binary16_bits / from_bfloat16_bits are the independent oracle: the header
  // cannot reuse them (it stays free of MPFR for the fuzzer), so the test compares the two.
  for (const bool brain : {false, true}) {
    int mismatches = 0;
    for (std::uint32_t b = 0; b <= 0xFFFF; ++b) {
      const auto bits = static_cast<std::uint16_t>(b);
      const double got = brain ? st::bfloat16_to_double(bits) : st::half_to_double(bits);
      const mpfr_real want = brain ? from_bfloat16_bits(bits) : from_binary16_bits(bits);
      mpfr_srcptr w = want.backend().data();
      bool ok;
      if (mpfr_nan_p(w)) {
        // The payload and sign travel into the double's top fraction bits.
        const int fraction_bits = brain ? 7 : 10;
        const std::uint64_t want_bits = (std::uint64_t{(b >> 15) & 1} << 63) | (std::uint64_t{0x7FF} << 52) |
                                        (std::uint64_t{b & ((1u << fraction_bits) - 1)} << (52 - fraction_bits));
        ok = std::isnan(got) && bits_of(got) == want_bits;
      } else {
        ok = mpfr_cmp_d(w, got) == 0 && (std::signbit(got) == (mpfr_signbit(w) != 0));
      }
      if (!ok && ++mismatches <= 5) FAIL_CHECK((brain ? "BF16 " : "F16 "), b, " decodes to ", got);
    }
    CHECK(mismatches == 0);
  }
  CHECK(st::half_to_double(0x0001) == std::ldexp(1.0, -24));
  CHECK(st::half_to_double(0x7BFF) == 65504.0);
  CHECK(st::bfloat16_to_double(0x0001) == std::ldexp(1.0, -133));
  CHECK(bits_of(st::bfloat16_to_double(0x8000)) == bits_of(-0.0));
}

TEST_CASE("safetensors: F16 and BF16 round trip through a file") {
  const std::vector<std::uint16_t> half{0x3C00, 0x8000, 0x0001, 0x03FF, 0x7C00, 0xFC00, 0x7C01, 0xFE55};
  const std::vector<std::uint16_t> brain{0x3F80, 0x8000, 0x0001, 0x7F80, 0x7F81, 0xFFC3};
  st::file f;
  f.tensors.push_back(st::make_bits16("h", st::dtype::f16, {2, 4}, half));
  f.tensors.push_back(st::make_bits16("b", st::dtype::bf16, {6}, brain));
  const st::file g = round_trip(f);
  REQUIRE(g.tensors.size() == 2);
  CHECK(*g.find("h") == f.tensors[0]);
  CHECK(*g.find("b") == f.tensors[1]);
  const std::vector<double> h = st::to_doubles(*g.find("h"));
  CHECK(h[0] == 1.0);
  CHECK(h[2] == std::ldexp(1.0, -24));
  CHECK(h[3] == std::ldexp(1023.0, -24));
  CHECK(std::isinf(h[5]));
  CHECK(h[5] < 0);
  CHECK(bits_of(h[6]) == 0x7FF0040000000000);  // signalling NaN payload 1, kept
  CHECK(std::isnan(h[7]));
  CHECK(std::signbit(h[7]));
  CHECK_THROWS_WITH_AS(st::make_bits16("q", st::dtype::f32, {1}, std::vector<std::uint16_t>{0}),
                       "q: make_bits16 takes F16 or BF16, got F32", input_error);
}

TEST_CASE("safetensors: integer dtypes round trip; to_doubles and to_int64s") {
  const std::int64_t big = std::int64_t{1} << 60;
  const std::vector<std::int64_t> i64{std::numeric_limits<std::int64_t>::min(), -1, 0, big, std::int64_t{1} << 53};
  const std::vector<std::int8_t> i8{-128, -1, 0, 127};
  st::file f;
  f.tensors.push_back(st::make_i64("i", {5}, i64));
  f.tensors.push_back(st::make_i8("c", {2, 2}, i8));
  f.tensors.push_back(st::tensor_entry{"w", st::dtype::i32, {2}, {0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x80}});
  f.tensors.push_back(st::tensor_entry{"u", st::dtype::u8, {3}, {0, 128, 255}});
  const st::file g = round_trip(f);
  CHECK(st::to_int64s(g.at("i", "g")) == i64);
  CHECK(st::to_int64s(g.at("c", "g")) == std::vector<std::int64_t>{-128, -1, 0, 127});
  CHECK(st::to_int64s(g.at("w", "g")) == std::vector<std::int64_t>{-1, std::numeric_limits<std::int32_t>::min()});
  CHECK(st::to_int64s(g.at("u", "g")) == std::vector<std::int64_t>{0, 128, 255});
  // Exactly representable I64 values convert (-2^63, 2^60, 2^53); 2^53 + 1 does not.
  const std::vector<double> d = st::to_doubles(g.at("i", "g"));
  CHECK(d[0] == -std::ldexp(1.0, 63));
  CHECK(d[3] == std::ldexp(1.0, 60));
  CHECK(st::to_doubles(g.at("u", "g")) == std::vector<double>{0, 128, 255});
  CHECK(st::to_doubles(g.at("c", "g")) == std::vector<double>{-128, -1, 0, 127});
  CHECK_THROWS_WITH_AS(
      st::to_doubles(st::make_i64("n", {1, 2}, std::vector<std::int64_t>{0, (std::int64_t{1} << 53) + 1})),
      "tensor 'n': I64 element [0, 1] is 9007199254740993, which a double cannot hold exactly", st::format_error);
  CHECK_THROWS_WITH_AS(
      st::to_doubles(st::make_i64("m", {1}, std::vector<std::int64_t>{std::numeric_limits<std::int64_t>::max()})),
      doctest::Contains("tensor 'm': I64 element [0] is 9223372036854775807"), st::format_error);
  CHECK_THROWS_WITH_AS(st::to_int64s(st::make_f32("s", {1}, std::vector<float>{1.0f})),
                       "tensor 's': dtype F32 is a floating-point type; integers are read from I64, I32, I8 or U8",
                       st::format_error);
  CHECK_THROWS_WITH_AS(st::to_int64s(st::make_bits16("h", st::dtype::bf16, {1}, std::vector<std::uint16_t>{0})),
                       doctest::Contains("tensor 'h': dtype BF16 is a floating-point type"), st::format_error);
  // A hand-built entry whose bytes do not match its shape is refused, not read past its end.
  CHECK_THROWS_WITH_AS(st::to_doubles(st::tensor_entry{"bad", st::dtype::f32, {2}, {0, 0, 0}}),
                       "tensor 'bad': holds 3 bytes, but F32 [2] needs 8", st::format_error);
  CHECK_THROWS_WITH_AS(st::to_int64s(st::tensor_entry{"bad", st::dtype::i32, {1}, {0}}),
                       "tensor 'bad': holds 1 bytes, but I32 [1] needs 4", st::format_error);
}

TEST_CASE("safetensors: scalars, empty tensors and metadata round trip") {
  st::file f;
  f.metadata = {{"format", "np"}, {"note", "h\xC3\xA9llo \"quoted\"\n"}};
  f.tensors.push_back(st::make_f64("scalar", {}, std::vector<double>{2.5}));
  f.tensors.push_back(st::make_f32("empty", {0, 3}, std::vector<float>{}));
  f.tensors.push_back(st::make_i8("e2", {4, 0}, std::vector<std::int8_t>{}));
  f.tensors.push_back(st::make_f64("\xC3\xA9t\xC3\xA9 \"x\"", {1}, std::vector<double>{1}));
  st::file sorted = f;
  std::sort(sorted.tensors.begin(), sorted.tensors.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  const st::file g = round_trip(f);
  CHECK(g == sorted);  // parse returns the tensors sorted by name
  CHECK(st::to_doubles(g.at("scalar", "g")) == std::vector<double>{2.5});
  CHECK(g.at("empty", "g").bytes.empty());
  CHECK(st::to_doubles(g.at("empty", "g")).empty());
  // Serialising is deterministic: the order in memory does not matter.
  CHECK(st::serialise(f) == st::serialise(sorted));
  CHECK(st::serialise(g) == st::serialise(f));
  CHECK(g.find("absent") == nullptr);
  CHECK_THROWS_WITH_AS((void)g.at("absent", "cand.safetensors"), "cand.safetensors: no tensor 'absent'",
                       st::format_error);
}

TEST_CASE("safetensors: the exact bytes of a small file") {
  // Tensors given out of order: b (U8 [2] = {1, 2}) then a (I8 scalar = -1), metadata {k: v}.
  // The header is compact JSON with sorted keys; "__metadata__" sorts before "a" ('_' is 0x5F):
  //   {"__metadata__":{"k":"v"},                                    1+14+1+9+1      = 26 bytes
  //   "a":{"data_offsets":[0,1],"dtype":"I8","shape":[]},            3+1+1+14+1+5+1+7+1+4+1+7+1+2+1+1 = 51
  //   "b":{"data_offsets":[1,3],"dtype":"U8","shape":[2]}}           3+1+1+14+1+5+1+7+1+4+1+7+1+3+1+1 = 52
  // 129 bytes, padded with 7 spaces to 136 = 0x88, a multiple of 8. Then the data in name order:
  // a's 0xFF, b's 0x01 0x02. 8 + 136 + 3 = 147 bytes.
  st::file f;
  f.metadata["k"] = "v";
  f.tensors.push_back(st::tensor_entry{"b", st::dtype::u8, {2}, {1, 2}});
  f.tensors.push_back(st::make_i8("a", {}, std::vector<std::int8_t>{-1}));
  const std::string header =
      "{\"__metadata__\":{\"k\":\"v\"},"
      "\"a\":{\"data_offsets\":[0,1],\"dtype\":\"I8\",\"shape\":[]},"
      "\"b\":{\"data_offsets\":[1,3],\"dtype\":\"U8\",\"shape\":[2]}}"
      "       ";
  std::vector<std::uint8_t> want{0x88, 0, 0, 0, 0, 0, 0, 0};
  want.insert(want.end(), header.begin(), header.end());
  want.insert(want.end(), {0xFF, 0x01, 0x02});
  REQUIRE(header.size() == 136);
  const std::vector<std::uint8_t> got = st::serialise(f);
  CHECK(got.size() == 147);
  CHECK(got == want);
  // No metadata: the key is omitted, not written as {}.
  st::file bare;
  bare.tensors.push_back(st::make_i8("a", {}, std::vector<std::int8_t>{-1}));
  const std::string bare_header = "{\"a\":{\"data_offsets\":[0,1],\"dtype\":\"I8\",\"shape\":[]}}";  // 52 -> 56
  const std::vector<std::uint8_t> bare_bytes = st::serialise(bare);
  CHECK(bare_bytes[0] == 56);
  CHECK(std::string(bare_bytes.begin() + 8, bare_bytes.begin() + 64) == bare_header + "    ");
  // An empty file: {} padded to 8.
  CHECK(st::serialise(st::file{}) == raw("{}      "));
}

TEST_CASE("safetensors: reads a file written by Python's safetensors") {
  // safetensors.numpy.save({"w": float32 [1.5, -2], "n": int64 [7]}, metadata={"format": "np"}),
  // safetensors 0.8.0: fields in its own order, tensors laid out by alignment, header padded.
  const std::string header =
      "{\"__metadata__\":{\"format\":\"np\"},\"n\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]},"
      "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}     ";
  const std::vector<std::uint8_t> data{0x07, 0, 0, 0, 0, 0, 0, 0, 0x00, 0x00, 0xC0, 0x3F, 0x00, 0x00, 0x00, 0xC0};
  const std::vector<std::uint8_t> bytes = raw(header, data);
  REQUIRE(bytes.size() == 168);
  const st::file f = parse(bytes);
  CHECK(f.metadata == std::map<std::string, std::string>{{"format", "np"}});
  CHECK(st::to_int64s(f.at("n", "py")) == std::vector<std::int64_t>{7});
  CHECK(st::to_doubles(f.at("w", "py")) == std::vector<double>{1.5, -2.0});
  CHECK(f.at("w", "py").shape == shape_t{2});
}

TEST_CASE("safetensors: accepted edge cases") {
  CHECK(parse(raw("{}")).tensors.empty());
  CHECK(parse(raw("  {}  \n\t")).tensors.empty());  // JSON whitespace around the object
  CHECK(parse(raw("{\"__metadata__\":{}}")).metadata.empty());
  // Empty tensors may share an offset with each other and with a boundary.
  const st::file f = parse(raw("{" + entry("a", "U8", "[0]", "[0,0]") + "," + entry("b", "F32", "[1]", "[0,4]") + "," +
                                   entry("c", "I64", "[2,0]", "[4,4]") + "," + entry("d", "U8", "[0]", "[4,4]") + "}",
                               {0, 0, 0x80, 0x3F}));
  CHECK(f.tensors.size() == 4);
  CHECK(st::to_doubles(f.at("b", "f")) == std::vector<double>{1.0});
  // Exactly 16 dimensions is the limit, not over it.
  CHECK(parse(raw("{" + entry("a", "U8", "[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]", "[0,1]") + "}", {7})).tensors.size() ==
        1);
  // [0, 2^32, 2^32] holds no element: the left-to-right product never overflows (as in Rust).
  CHECK(parse(raw("{" + entry("a", "F64", "[0,4294967296,4294967296]", "[0,0]") + "}")).tensors.size() == 1);
}

// --- one test per validation rule ---------------------------------------------------------------

TEST_CASE("safetensors rule: at least the 8-byte header length") {
  CHECK_THROWS_WITH_AS(parse({1, 2, 3, 4, 5}),
                       doctest::Contains("t.st: file is 5 bytes, shorter than the 8-byte header length"),
                       st::format_error);
  CHECK_THROWS_WITH_AS(parse({}), doctest::Contains("t.st: file is 0 bytes"), st::format_error);
}

TEST_CASE("safetensors rule: header length within the file and at most 100 MB") {
  CHECK_THROWS_WITH_AS(parse(with_length(50, "{}")),
                       "t.st: header length 50 exceeds the 2 bytes after the length field (truncated file?)",
                       st::format_error);
  CHECK_THROWS_WITH_AS(parse(with_length(100'000'001, "{}")),
                       "t.st: header length 100000001 exceeds the limit of 100000000 bytes", st::format_error);
  // A length near 2^64 must not wrap around any addition.
  CHECK_THROWS_WITH_AS(parse(with_length(~std::uint64_t{0}, "{}")), doctest::Contains("exceeds the limit"),
                       st::format_error);
}

TEST_CASE("safetensors rule: header is valid JSON") {
  CHECK_THROWS_WITH_AS(parse(raw("{\"a\":")), doctest::Contains("t.st: header: not valid JSON"), st::format_error);
  CHECK_THROWS_WITH_AS(parse(raw("")), doctest::Contains("t.st: header: not valid JSON"), st::format_error);
  // nlohmann alone would stop at a NUL byte and accept this.
  CHECK_THROWS_WITH_AS(parse(raw(std::string("{}\0x", 4))),
                       "t.st: header: not valid JSON: a NUL byte at offset 2 of the header", st::format_error);
  CHECK_THROWS_WITH_AS(parse(raw("{\"\xFF\":{}}")), doctest::Contains("not valid JSON"),
                       st::format_error);  // bad UTF-8
  CHECK_THROWS_WITH_AS(parse(raw("{\"a\":{\"shape\":[1e400]}}")), doctest::Contains("not valid JSON"),
                       st::format_error);
  CHECK_THROWS_WITH_AS(parse(raw("\xEF\xBB\xBF{}")),
                       "t.st: header: starts with a UTF-8 byte order mark, which is not JSON", st::format_error);
}

TEST_CASE("safetensors rule: header is an object") {
  CHECK_THROWS_WITH_AS(parse(raw("[1, 2]")), "t.st: header: must be a JSON object, got array", st::format_error);
  CHECK_THROWS_WITH_AS(parse(raw("3")), "t.st: header: must be a JSON object, got 3", st::format_error);
  CHECK_THROWS_WITH_AS(parse(raw("\"x\"")), "t.st: header: must be a JSON object, got \"x\"", st::format_error);
}

TEST_CASE("safetensors rule: no duplicate keys") {
  const std::string a = entry("a", "U8", "[1]", "[0,1]");
  CHECK_THROWS_WITH_AS(parse(raw("{" + a + "," + a + "}", {1})), "t.st: header: duplicate key 'a'", st::format_error);
  CHECK_THROWS_WITH_AS(
      parse(raw("{\"a\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", {1})),
      "t.st: tensor 'a': duplicate field 'dtype'", st::format_error);
  CHECK_THROWS_WITH_AS(parse(raw("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}")),
                       "t.st: __metadata__: duplicate key 'k'", st::format_error);
  CHECK_THROWS_WITH_AS(parse(raw("{\"__metadata__\":{},\"__metadata__\":{}}")),
                       "t.st: header: duplicate key '__metadata__'", st::format_error);
}

TEST_CASE("safetensors rule: __metadata__ is an object of strings") {
  CHECK_THROWS_WITH_AS(parse(raw("{\"__metadata__\":[\"a\"]}")),
                       "t.st: __metadata__: must be an object of strings, got array", st::format_error);
  CHECK_THROWS_WITH_AS(parse(raw("{\"__metadata__\":null}")),
                       "t.st: __metadata__: must be an object of strings, got null", st::format_error);
  CHECK_THROWS_WITH_AS(parse(raw("{\"__metadata__\":{\"k\":1}}")),
                       "t.st: __metadata__: value of 'k' must be a string, got 1", st::format_error);
  CHECK_THROWS_WITH_AS(parse(raw("{\"__metadata__\":{\"k\":{\"x\":\"y\"}}}")),
                       "t.st: __metadata__: value of 'k' must be a string, got object", st::format_error);
  CHECK_THROWS_WITH_AS(parse(raw("{\"__metadata__\":{\"k\":[\"y\"]}}")),
                       "t.st: __metadata__: value of 'k' must be a string, got array", st::format_error);
}

TEST_CASE("safetensors rule: a tensor is an object with exactly dtype, shape and data_offsets") {
  CHECK_THROWS_WITH_AS(parse(raw("{\"a\":[1]}")),
                       "t.st: tensor 'a': must be an object with fields dtype, shape, data_offsets, got array",
                       st::format_error);
  CHECK_THROWS_WITH_AS(parse(raw("{\"a\":true}")),
                       "t.st: tensor 'a': must be an object with fields dtype, shape, data_offsets, got true",
                       st::format_error);
  CHECK_THROWS_WITH_AS(parse(raw("{\"a\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", {1})),
                       "t.st: tensor 'a': missing field 'shape' (a tensor has exactly dtype, shape, data_offsets)",
                       st::format_error);
  CHECK_THROWS_WITH_AS(parse(raw("{\"a\":{}}")), doctest::Contains("t.st: tensor 'a': missing field 'dtype'"),
                       st::format_error);
  CHECK_THROWS_WITH_AS(parse(raw("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"offsets\":[0,1]}}", {1})),
                       "t.st: tensor 'a': unknown field 'offsets' (a tensor has exactly dtype, shape, data_offsets)",
                       st::format_error);
}

TEST_CASE("safetensors rule: dtype is a known name") {
  CHECK_THROWS_WITH_AS(parse(raw("{" + entry("a", "F8_E4M3", "[1]", "[0,1]") + "}", {1})),
                       "t.st: tensor 'a': unknown dtype 'F8_E4M3' (supported: F64, F32, F16, BF16, I64, I32, I8, U8)",
                       st::format_error);
  CHECK_THROWS_WITH_AS(parse(raw("{\"a\":{\"dtype\":8,\"shape\":[1],\"data_offsets\":[0,1]}}", {1})),
                       "t.st: tensor 'a': dtype must be a string, got 8", st::format_error);
  CHECK_THROWS_WITH_AS(parse(raw("{\"a\":{\"dtype\":[\"U8\"],\"shape\":[1],\"data_offsets\":[0,1]}}", {1})),
                       "t.st: tensor 'a': dtype must be a string, got array", st::format_error);
}

TEST_CASE("safetensors rule: shape is an array of at most 16 non-negative integers") {
  CHECK_THROWS_WITH_AS(parse(raw("{" + entry("a", "U8", "\"1\"", "[0,1]") + "}", {1})),
                       "t.st: tensor 'a': shape must be an array of non-negative integers, got \"1\"",
                       st::format_error);
  CHECK_THROWS_WITH_AS(parse(raw("{" + entry("a", "U8", "{}", "[0,1]") + "}", {1})),
                       "t.st: tensor 'a': shape must be an array of non-negative integers, got object",
                       st::format_error);
  CHECK_THROWS_WITH_AS(parse(raw("{" + entry("a", "U8", "[1,-2]", "[0,1]") + "}", {1})),
                       "t.st: tensor 'a': shape[1] must be a non-negative integer, got -2", st::format_error);
  CHECK_THROWS_WITH_AS(parse(raw("{" + entry("a", "U8", "[-0]", "[0,1]") + "}", {1})),
                       "t.st: tensor 'a': shape[0] must be a non-negative integer, got -0", st::format_error);
  CHECK_THROWS_WITH_AS(parse(raw("{" + entry("a", "U8", "[1.0]", "[0,1]") + "}", {1})),
                       "t.st: tensor 'a': shape[0] must be a non-negative integer, got 1.0", st::format_error);
  CHECK_THROWS_WITH_AS(parse(raw("{" + entry("a", "U8", "[[1]]", "[0,1]") + "}", {1})),
                       "t.st: tensor 'a': shape[0] must be a non-negative integer, got array", st::format_error);
  CHECK_THROWS_WITH_AS(parse(raw("{" + entry("a", "U8", "[18446744073709551616]", "[0,1]") + "}", {1})),
                       "t.st: tensor 'a': shape[0] must be a non-negative integer, got 18446744073709551616",
                       st::format_error);
  CHECK_THROWS_WITH_AS(parse(raw("{" + entry("a", "U8", "[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]", "[0,1]") + "}", {1})),
                       "t.st: tensor 'a': shape has more than 16 dimensions (the limit)", st::format_error);
}

TEST_CASE("safetensors rule: data_offsets are two non-negative integers") {
  CHECK_THROWS_WITH_AS(parse(raw("{" + entry("a", "U8", "[1]", "0") + "}", {1})),
                       "t.st: tensor 'a': data_offsets must be an array of two non-negative integers, got 0",
                       st::format_error);
  CHECK_THROWS_WITH_AS(parse(raw("{" + entry("a", "U8", "[1]", "[1]") + "}", {1})),
                       "t.st: tensor 'a': data_offsets must be an array of two non-negative integers, got 1 elements",
                       st::format_error);
  CHECK_THROWS_WITH_AS(
      parse(raw("{" + entry("a", "U8", "[1]", "[0,1,2]") + "}", {1})),
      doctest::Contains("t.st: tensor 'a': data_offsets must be an array of two non-negative integers, "
                        "got more than 2"),
      st::format_error);
  CHECK_THROWS_WITH_AS(parse(raw("{" + entry("a", "U8", "[1]", "[-1,0]") + "}", {1})),
                       "t.st: tensor 'a': data_offsets[0] must be a non-negative integer, got -1", st::format_error);
}

TEST_CASE("safetensors rule: begin <= end <= data buffer size") {
  CHECK_THROWS_WITH_AS(parse(raw("{" + entry("a", "U8", "[0]", "[4,0]") + "}", {1, 2, 3, 4})),
                       "t.st: tensor 'a': data_offsets [4, 0] run backwards (begin > end)", st::format_error);
  CHECK_THROWS_WITH_AS(parse(raw("{" + entry("a", "U8", "[8]", "[0,8]") + "}", {1, 2, 3, 4})),
                       "t.st: tensor 'a': data_offsets [0, 8] end beyond the 4-byte data buffer", st::format_error);
  CHECK_THROWS_WITH_AS(
      parse(raw("{" + entry("a", "U8", "[1]", "[18446744073709551615,18446744073709551615]") + "}", {1})),
      doctest::Contains("t.st: tensor 'a': data_offsets [18446744073709551615, 18446744073709551615] end beyond"),
      st::format_error);
}

TEST_CASE("safetensors rule: the byte count matches dtype and shape") {
  // The message of the brief, word for word.
  CHECK_THROWS_WITH_AS(st::parse(raw("{" + entry("o", "F32", "[2,2]", "[0,12]") + "}", std::vector<std::uint8_t>(12)),
                                 "cand.safetensors"),
                       "cand.safetensors: tensor 'o': data_offsets [0, 12] hold 12 bytes, but F32 [2, 2] needs 16",
                       st::format_error);
  CHECK_THROWS_WITH_AS(parse(raw("{" + entry("s", "F64", "[]", "[0,4]") + "}", {1, 2, 3, 4})),
                       "t.st: tensor 's': data_offsets [0, 4] hold 4 bytes, but F64 [] needs 8", st::format_error);
}

TEST_CASE("safetensors rule: the byte count does not overflow") {
  // 2^32 * 2^32 overflows before the 0 is reached (the reference implementation folds left too).
  CHECK_THROWS_WITH_AS(parse(raw("{" + entry("a", "U8", "[4294967296,4294967296,0]", "[0,0]") + "}")),
                       "t.st: tensor 'a': U8 [4294967296, 4294967296, 0]: the byte count overflows 64 bits",
                       st::format_error);
  // 2^62 elements fit, 2^62 * 4 bytes do not; 2^64 / 4 wrapping to 0 must not pass as an empty tensor.
  CHECK_THROWS_WITH_AS(parse(raw("{" + entry("a", "F32", "[4611686018427387904]", "[0,0]") + "}")),
                       "t.st: tensor 'a': F32 [4611686018427387904]: the byte count overflows 64 bits",
                       st::format_error);
}

TEST_CASE("safetensors rule: tensors do not overlap") {
  CHECK_THROWS_WITH_AS(parse(raw("{" + entry("a", "U8", "[8]", "[0,8]") + "," + entry("b", "U8", "[8]", "[4,12]") + "}",
                                 std::vector<std::uint8_t>(12))),
                       "t.st: tensor 'b': data_offsets [4, 12] overlap tensor 'a', which ends at 8 (rule: tensors tile "
                       "the data buffer)",
                       st::format_error);
  // Two tensors on the same bytes.
  CHECK_THROWS_WITH_AS(parse(raw("{" + entry("a", "U8", "[4]", "[0,4]") + "," + entry("b", "I8", "[4]", "[0,4]") + "}",
                                 std::vector<std::uint8_t>(4))),
                       doctest::Contains("t.st: tensor 'b': data_offsets [0, 4] overlap tensor 'a'"), st::format_error);
  // An empty tensor inside another one's bytes.
  CHECK_THROWS_WITH_AS(parse(raw("{" + entry("a", "U8", "[4]", "[0,4]") + "," + entry("e", "U8", "[0]", "[2,2]") + "}",
                                 std::vector<std::uint8_t>(4))),
                       doctest::Contains("t.st: tensor 'e': data_offsets [2, 2] overlap tensor 'a'"), st::format_error);
}

TEST_CASE("safetensors rule: no holes between tensors") {
  CHECK_THROWS_WITH_AS(parse(raw("{" + entry("a", "U8", "[4]", "[0,4]") + "," + entry("b", "U8", "[4]", "[8,12]") + "}",
                                 std::vector<std::uint8_t>(12))),
                       "t.st: tensor 'b': data_offsets [8, 12] leave a hole: bytes [4, 8) belong to no tensor (rule: "
                       "tensors tile the data buffer)",
                       st::format_error);
  CHECK_THROWS_WITH_AS(parse(raw("{" + entry("a", "U8", "[4]", "[2,6]") + "}", std::vector<std::uint8_t>(6))),
                       doctest::Contains("t.st: tensor 'a': data_offsets [2, 6] leave a hole: bytes [0, 2)"),
                       st::format_error);
}

TEST_CASE("safetensors rule: the tensors cover the data buffer exactly") {
  CHECK_THROWS_WITH_AS(parse(raw("{" + entry("a", "U8", "[4]", "[0,4]") + "}", std::vector<std::uint8_t>(6))),
                       "t.st: data buffer is 6 bytes, but the tensors cover 4: bytes [4, 6) belong to no tensor (rule: "
                       "tensors tile the data buffer)",
                       st::format_error);
  CHECK_THROWS_WITH_AS(parse(raw("{}", {0})),
                       doctest::Contains("t.st: data buffer is 1 bytes, but the tensors cover 0"), st::format_error);
}

TEST_CASE("safetensors rule: tensor names are non-empty") {
  CHECK_THROWS_WITH_AS(parse(raw("{" + entry("", "U8", "[1]", "[0,1]") + "}", {1})),
                       "t.st: tensor '': empty tensor name (rule: names are non-empty)", st::format_error);
}

TEST_CASE("safetensors: serialise refuses a file that parse would refuse") {
  const auto one = [](std::string name) { return st::make_i8(std::move(name), {1}, std::vector<std::int8_t>{1}); };
  st::file dup;
  dup.tensors = {one("a"), one("a")};
  CHECK_THROWS_WITH_AS(st::serialise(dup), "serialise: tensor 'a': duplicate tensor name", st::format_error);
  st::file empty_name;
  empty_name.tensors = {one("")};
  CHECK_THROWS_WITH_AS(st::serialise(empty_name), doctest::Contains("tensor '': empty tensor name"), st::format_error);
  st::file reserved;
  reserved.tensors = {one("__metadata__")};
  CHECK_THROWS_WITH_AS(st::serialise(reserved),
                       "serialise: tensor '__metadata__': the name is reserved for the metadata", st::format_error);
  st::file short_bytes;
  short_bytes.tensors = {st::tensor_entry{"x", st::dtype::f32, {2}, {0, 0, 0, 0}}};
  CHECK_THROWS_WITH_AS(st::serialise(short_bytes), "serialise: tensor 'x': holds 4 bytes, but F32 [2] needs 8",
                       st::format_error);
  st::file deep;
  deep.tensors = {st::tensor_entry{"x", st::dtype::u8, shape_t(17, 1), {0}}};
  CHECK_THROWS_WITH_AS(st::serialise(deep), "serialise: tensor 'x': shape has 17 dimensions, more than the limit of 16",
                       st::format_error);
  st::file bad_utf8;
  bad_utf8.tensors = {one("\xFF")};
  CHECK_THROWS_WITH_AS(st::serialise(bad_utf8), doctest::Contains("is not valid UTF-8"), st::format_error);
  st::file bad_meta;
  bad_meta.metadata["k"] = "\xC3";
  CHECK_THROWS_WITH_AS(st::serialise(bad_meta), "serialise: __metadata__ value of 'k' is not valid UTF-8",
                       st::format_error);
  CHECK_THROWS_WITH_AS(st::make_f64("m", {2, 2}, std::vector<double>{1, 2, 3}),
                       "m: shape [2, 2] holds 4 elements, got 3", input_error);
}

TEST_CASE("safetensors: write_atomic and read") {
  const fs::path dir = scratch_dir("write");
  const fs::path target = dir / "out.safetensors";
  st::file f;
  f.metadata["k"] = "v";
  f.tensors.push_back(st::make_f32("o", {2}, std::vector<float>{1.0f, -2.0f}));

  st::write_atomic(target, f);
  CHECK(listing(dir) == std::vector<std::string>{"out.safetensors"});  // no temporary left behind
  CHECK(st::read(target) == f);
  const std::vector<std::uint8_t> bytes = st::serialise(f);
  CHECK(slurp(target) == std::string(bytes.begin(), bytes.end()));

  // Replacing an existing file.
  st::file g = f;
  g.tensors[0] = st::make_f32("o", {1}, std::vector<float>{3.0f});
  st::write_atomic(target, g);
  CHECK(st::read(target) == g);
  CHECK(listing(dir) == std::vector<std::string>{"out.safetensors"});
  const std::string before = slurp(target);

  // A missing directory: runtime_error naming the path; nothing is created.
  const fs::path missing = dir / "no_such_dir" / "x.safetensors";
  CHECK_THROWS_WITH_AS(st::write_atomic(missing, f), doctest::Contains(missing.string().c_str()), std::runtime_error);
  CHECK(listing(dir) == std::vector<std::string>{"out.safetensors"});

  // The rename fails (the target is a directory): the temporary is removed, the directory kept.
  const fs::path blocked = dir / "blocked";
  fs::create_directories(blocked / "inside");
  const std::string blocked_quoted = "'" + blocked.string() + "'";
  CHECK_THROWS_WITH_AS(st::write_atomic(blocked, f), doctest::Contains(blocked_quoted.c_str()), std::runtime_error);
  CHECK(listing(dir) == std::vector<std::string>{"blocked", "out.safetensors"});
  CHECK(fs::is_directory(blocked / "inside"));

  // An invalid file is refused before anything is touched: the existing file keeps its bytes.
  st::file invalid = f;
  invalid.tensors.push_back(invalid.tensors[0]);
  CHECK_THROWS_AS(st::write_atomic(target, invalid), st::format_error);
  CHECK(slurp(target) == before);
  CHECK(listing(dir) == std::vector<std::string>{"blocked", "out.safetensors"});

  // read: I/O errors and malformed files name the path.
  const std::string absent = (dir / "absent.safetensors").string() + ": cannot open";
  CHECK_THROWS_WITH_AS(st::read(dir / "absent.safetensors"), doctest::Contains(absent.c_str()), st::format_error);
  CHECK_THROWS_WITH_AS(st::read(blocked), (blocked.string() + ": cannot read: is a directory").c_str(),
                       st::format_error);
  std::ofstream(dir / "short.safetensors", std::ios::binary) << "abc";
  const std::string too_short = (dir / "short.safetensors").string() + ": file is 3 bytes";
  CHECK_THROWS_WITH_AS(st::read(dir / "short.safetensors"), doctest::Contains(too_short.c_str()), st::format_error);
  fs::remove_all(dir);
}

TEST_CASE("safetensors: read refuses what is not a regular file and reads no more than the header declares") {
  const fs::path dir = scratch_dir("hostile");
  auto message = [](const fs::path& p) {
    try {
      st::read(p);
    } catch (const st::format_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // A symbolic link to /dev/zero (a character device that never ends) and a FIFO (opening it would
  // block until a writer comes): refused before they are opened.
  fs::create_symlink("/dev/zero", dir / "zero.safetensors");
  CHECK(message(dir / "zero.safetensors").find("not a regular file") != std::string::npos);
  REQUIRE(::mkfifo((dir / "fifo.safetensors").c_str(), 0600) == 0);
  CHECK(message(dir / "fifo.safetensors").find("not a regular file") != std::string::npos);

  // A 2 GB sparse file whose header is not JSON: refused from its first bytes (a read of the whole
  // file would allocate 2 GB first).
  const fs::path sparse = dir / "sparse.safetensors";
  {
    std::ofstream out(sparse, std::ios::binary);
    const char header[8] = {2, 0, 0, 0, 0, 0, 0, 0};
    out.write(header, 8);
    out << "{x";
  }
  fs::resize_file(sparse, std::uintmax_t{2} << 30);
  CHECK(message(sparse).find("header: not valid JSON") != std::string::npos);

  // A valid file with bytes appended, and the same file cut short: refused by the sizes alone.
  st::file f;
  f.tensors.push_back(st::make_f32("o", {2}, std::vector<float>{1.0f, -2.0f}));
  const fs::path longer = dir / "longer.safetensors", shorter = dir / "shorter.safetensors";
  st::write_atomic(longer, f);
  st::write_atomic(shorter, f);
  fs::resize_file(longer, fs::file_size(longer) + 5);
  fs::resize_file(shorter, fs::file_size(shorter) - 1);
  CHECK(message(longer).find("data buffer is 13 bytes, but the tensors cover 8") != std::string::npos);
  CHECK(message(shorter).find("declares a 8-byte data buffer") != std::string::npos);
  fs::remove_all(dir);
}
