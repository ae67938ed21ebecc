// The C++ half of proof.scan_fidelity (proofs/coq_check.py, `fidelity`): the reference's own scan
// schedules, compiled from reference/include/kalman_oracle/scan/*.hpp and called through
// schedules.hpp's dispatchers, run over the free magma of expression trees, and every output
// printed as a tree. The Coq half (scan_trees.ml over the extraction of proofs/Scan.v) prints the
// same cases in the same form; equal streams mean that the compiled code performs exactly the
// composes of the proven models, with the same operands in the same order.
//
//   scan_trees <cases file>
//
// Each line of the cases file is `<schedule> <inclusive|exclusive> <n> <chunk size or ->`; for each
// one the program prints `# <the line>`, then the n outputs of that scan on the leaves 0 … n−1, one
// per line: a leaf is its index, the identity `e`, a compose `(later earlier)`.
//
// Why a magma of trees and not a monoid: nothing is identified, so any difference in which values
// are composed, in which order, how they are grouped, or a compose with the identity shows up as a
// different tree. (The free monoid of word_monoid.hpp would forget the grouping and absorb the
// identity.) The schedules' control flow depends on n and the chunk size only, so an output's tree
// is the computation itself, for every input of that length over every monoid: equal trees mean
// equal results and equal roundings.
//
// Built twice (proofs/CMakeLists.txt): plain, as every user compiles the headers, and with the
// planted bugs of detail/mutant.hpp compiled in, for the meta-tests that show the comparison can fail.
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "kalman_oracle/scan/schedules.hpp"

namespace {

// One node of an expression tree. The trees of one scan live in one arena, so a compose is O(1)
// and a copy of a value (the schedules copy freely) is a copy of an index.
struct tree_node {
  enum class kind : std::uint8_t { leaf, identity, compose };
  kind what;
  std::uint32_t leaf;     // kind::leaf: the input's index
  std::uint32_t later;    // kind::compose: the left operand, the later map
  std::uint32_t earlier;  // kind::compose: the right operand
};

// A tree is its root's index in the arena; a distinct type so that no schedule can do arithmetic
// on it by accident.
struct tree {
  std::uint32_t root;
};

// The free magma over the leaves plus an identity element that is neutral only by name: compose
// never simplifies, so a compose with the identity stays visible as `(x e)` or `(e x)`.
class tree_magma {
 public:
  using value_type = tree;

  explicit tree_magma(std::vector<tree_node>& arena) : arena_(&arena) {}

  tree leaf(std::uint32_t index) const { return add({tree_node::kind::leaf, index, 0, 0}); }
  tree identity() const { return add({tree_node::kind::identity, 0, 0, 0}); }
  tree compose(const tree& later, const tree& earlier) const {
    return add({tree_node::kind::compose, 0, later.root, earlier.root});
  }

 private:
  tree add(const tree_node& node) const {
    arena_->push_back(node);
    return {static_cast<std::uint32_t>(arena_->size() - 1)};
  }
  std::vector<tree_node>* arena_;  // compose is const in scan_monoid; the arena is what grows
};

static_assert(kalman_oracle::scan_monoid<tree_magma>);

void write_tree(const std::vector<tree_node>& arena, std::uint32_t root, std::string& out) {
  const tree_node& node = arena[root];
  switch (node.what) {
    case tree_node::kind::leaf: {
      char digits[16];
      const auto end = std::to_chars(digits, digits + sizeof digits, node.leaf).ptr;
      out.append(digits, end);
      return;
    }
    case tree_node::kind::identity: out += 'e'; return;
    case tree_node::kind::compose:
      out += '(';
      write_tree(arena, node.later, out);
      out += ' ';
      write_tree(arena, node.earlier, out);
      out += ')';
      return;
  }
}

kalman_oracle::scan_schedule parse_schedule(const std::string& name) {
  for (const auto schedule : kalman_oracle::all_scan_schedules)
    if (kalman_oracle::to_string(schedule) == name) return schedule;
  throw std::invalid_argument("unknown schedule `" + name + "`");
}

// The output of one case, appended to `out`.
void run_case(const std::string& line, std::string& out) {
  std::istringstream fields(line);
  std::string schedule_name, mode, chunk;
  std::size_t n = 0;
  if (!(fields >> schedule_name >> mode >> n >> chunk) || (mode != "inclusive" && mode != "exclusive"))
    throw std::invalid_argument("bad case `" + line + "`");
  const auto schedule = parse_schedule(schedule_name);
  std::size_t chunk_size = kalman_oracle::default_scan_chunk_size;
  if ((schedule == kalman_oracle::scan_schedule::chunked) != (chunk != "-"))
    throw std::invalid_argument("case `" + line + "`: a chunk size goes with the chunked schedule only");
  if (chunk != "-") chunk_size = std::stoul(chunk);

  std::vector<tree_node> arena;
  const tree_magma magma(arena);
  std::vector<tree> xs;
  for (std::size_t i = 0; i < n; ++i) xs.push_back(magma.leaf(static_cast<std::uint32_t>(i)));
  const std::span<const tree> inputs(xs);
  const std::vector<tree> outputs = mode == "inclusive"
                                        ? kalman_oracle::inclusive_scan(schedule, magma, inputs, chunk_size)
                                        : kalman_oracle::exclusive_scan(schedule, magma, inputs, chunk_size);

  out += "# " + line + "\n";
  for (const tree& t : outputs) {
    write_tree(arena, t.root, out);
    out += '\n';
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: scan_trees <cases file>\n";
    return 2;
  }
  std::ifstream cases(argv[1]);
  if (!cases) {
    std::cerr << "scan_trees: cannot read " << argv[1] << "\n";
    return 2;
  }
  try {
    std::string line, out;
    while (std::getline(cases, line)) {
      if (line.empty()) continue;
      run_case(line, out);
      // One case at a time: the driver compares as the text arrives, and the largest case
      // (n = 1025) is a few MB.
      if (std::fwrite(out.data(), 1, out.size(), stdout) != out.size()) return 1;
      out.clear();
    }
  } catch (const std::exception& err) {
    std::cerr << "scan_trees: " << err.what() << "\n";
    return 2;
  }
  return std::fflush(stdout) == 0 ? 0 : 1;
}
