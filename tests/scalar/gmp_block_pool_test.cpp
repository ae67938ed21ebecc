// gmp_block_pool: GMP's memory functions backed by per-thread pools of freed blocks, one pool per
// exact size (scalar/gmp_block_pool.hpp). A block comes back only for its own size, contents survive
// a reallocation, the pools hold at most kept_per_size blocks a size, a freeing thread keeps what it
// frees, and MPFR computes the same bits through the pools as through malloc.
#include <doctest/doctest.h>

#include <cstring>
#include <thread>
#include <vector>

#include "kalman_oracle/scalar/gmp_block_pool.hpp"
#include "kalman_oracle/scalar/traits.hpp"

using namespace kalman_oracle;
using detail::gmp_block_pools;
using detail::gmp_pool_allocate;
using detail::gmp_pool_free;
using detail::gmp_pool_reallocate;
using detail::pools_of_this_thread;

namespace {

std::size_t pooled(std::size_t size) { return pools_of_this_thread.lists[size / gmp_block_pools::granule - 1].count; }

std::size_t pooled_in_all() {
  std::size_t n = 0;
  for (const auto& list : pools_of_this_thread.lists) n += list.count;
  return n;
}

/// x_{n+1} = x_n² / (x_n + 1/3) + 1/7 at 300 bits, 2000 steps: thousands of temporaries.
mpfr_real recurrence() {
  precision_scope scope(300);
  mpfr_real x = 1;
  for (int n = 0; n < 2000; ++n) x = x * x / (x + mpfr_real(1) / 3) + mpfr_real(1) / 7;
  return x;
}

}  // namespace

TEST_CASE("gmp_block_pool: a freed block comes back for a request of its own size only") {
  void* p = gmp_pool_allocate(48);
  const std::size_t before = pooled(48);
  gmp_pool_free(p, 48);
  CHECK(pooled(48) == before + 1);
  void* other = gmp_pool_allocate(56);  // another size: not the pooled block
  CHECK(other != p);
  CHECK(pooled(48) == before + 1);
  void* again = gmp_pool_allocate(48);
  CHECK(again == p);
  CHECK(pooled(48) == before);
  gmp_pool_free(again, 48);
  gmp_pool_free(other, 56);
}

TEST_CASE("gmp_block_pool: sizes off the granule or above the largest pooled size go to free") {
  const std::size_t odd = 44, large = gmp_block_pools::max_pooled_size + gmp_block_pools::granule;
  const std::size_t before_odd = pooled(48), before_large_neighbour = pooled(gmp_block_pools::max_pooled_size);
  gmp_pool_free(gmp_pool_allocate(odd), odd);
  gmp_pool_free(gmp_pool_allocate(large), large);
  CHECK(pooled(48) == before_odd);
  CHECK(pooled(gmp_block_pools::max_pooled_size) == before_large_neighbour);
}

TEST_CASE("gmp_block_pool: a pool keeps at most kept_per_size blocks of a size") {
  constexpr std::size_t size = 200, n = gmp_block_pools::kept_per_size + 10;
  std::vector<void*> blocks;
  for (std::size_t i = 0; i < n; ++i) blocks.push_back(gmp_pool_allocate(size));
  for (void* b : blocks) gmp_pool_free(b, size);
  CHECK(pooled(size) == gmp_block_pools::kept_per_size);
}

TEST_CASE("gmp_block_pool: a reallocation keeps the contents up to the smaller size") {
  auto* p = static_cast<unsigned char*>(gmp_pool_allocate(64));
  for (int i = 0; i < 64; ++i) p[i] = static_cast<unsigned char>(i + 1);
  auto* grown = static_cast<unsigned char*>(gmp_pool_reallocate(p, 64, 128));
  for (int i = 0; i < 64; ++i) REQUIRE(grown[i] == i + 1);
  auto* shrunk = static_cast<unsigned char*>(gmp_pool_reallocate(grown, 128, 16));
  for (int i = 0; i < 16; ++i) REQUIRE(shrunk[i] == i + 1);
  CHECK(gmp_pool_reallocate(shrunk, 16, 16) == shrunk);  // the same size: the same block
  void* fresh = gmp_pool_reallocate(nullptr, 0, 32);     // as GMP may: no block yet
  CHECK(fresh != nullptr);
  gmp_pool_free(fresh, 32);
  gmp_pool_free(shrunk, 16);
}

TEST_CASE("gmp_block_pool: a block freed on another thread joins that thread's pool, not this one's") {
  void* p = gmp_pool_allocate(72);
  const std::size_t here_before = pooled(72);
  std::size_t there_before = 0, there_after = 0;
  std::thread([&] {
    there_before = pooled(72);
    gmp_pool_free(p, 72);
    there_after = pooled(72);
  }).join();
  CHECK(there_after == there_before + 1);
  CHECK(pooled(72) == here_before);
}

TEST_CASE("gmp_block_pool: once a thread's pools are drained, its frees go to free") {
  std::size_t after_drain = 1;
  std::thread([&] {
    gmp_pool_free(gmp_pool_allocate(24), 24);
    REQUIRE(pooled(24) == 1);
    pools_of_this_thread.drain();
    after_drain = pooled(24);
    gmp_pool_free(gmp_pool_allocate(24), 24);
    after_drain += pooled(24);
  }).join();
  CHECK(after_drain == 0);
}

TEST_CASE("gmp_block_pool: MPFR computes the same bits through the pools as through malloc") {
  const mpfr_real by_malloc = recurrence();
  const std::size_t before = pooled_in_all();
  install_gmp_block_pool();
  const mpfr_real by_pool = recurrence();
  mp_set_memory_functions(nullptr, nullptr, nullptr);  // GMP's own functions again (malloc-backed, as the pools)
  CHECK(by_pool == by_malloc);
  CHECK(mpfr_get_prec(by_pool.backend().data()) == mpfr_get_prec(by_malloc.backend().data()));
#if !KALMAN_ORACLE_ADDRESS_SANITIZER
  CHECK(pooled_in_all() > before);  // not vacuous: the temporaries went through the pools
#endif
}
