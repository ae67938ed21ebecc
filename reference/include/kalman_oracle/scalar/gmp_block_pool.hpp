// GMP's (and so MPFR's and MPFI's) memory functions replaced by per-thread pools of freed blocks,
// one pool per exact block size: a speed measure only, no number changes.
//
// Why: the reference over MPFR creates and destroys a temporary for nearly every operation
// (Boost.Multiprecision without expression templates), each an mpfr_init2 (a malloc of the
// significand's limbs) and an mpfr_clear (a free). Profiling `kalman-oracle generate` on a KLA case
// showed malloc and free with their bookkeeping at about a fifth of the run (docs/conformance.md,
// "Generation time"). A freed block here goes onto a list of blocks of its exact size, and the next
// request of that size takes it back: a pop and a push instead of glibc's bins.
//
// Safety: GMP passes the size of a block both when it frees it and when it reallocates it, and a
// block is only ever handed out again for a request of exactly its size, so a block allocated by
// malloc before the pool was installed (a static initializer's) is as good as one of the pool's. A
// block freed on another thread than the one that allocated it joins the freeing thread's lists: every
// list is touched by its own thread only. Each list keeps at most `kept_per_size` blocks (the rest
// go back to free): a temporary's block comes back within a few operations, so a short list catches
// nearly every request, while a large tensor freed at once does not pin its memory in the pool.
// A thread's lists are freed when it ends.
#pragma once

#include <gmp.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(__SANITIZE_ADDRESS__)  // GCC
#define KALMAN_ORACLE_ADDRESS_SANITIZER 1
#elif defined(__has_feature)  // Clang
#if __has_feature(address_sanitizer)
#define KALMAN_ORACLE_ADDRESS_SANITIZER 1
#endif
#endif
#ifndef KALMAN_ORACLE_ADDRESS_SANITIZER
#define KALMAN_ORACLE_ADDRESS_SANITIZER 0
#endif

namespace kalman_oracle {

namespace detail {

/// One thread's pools: constant-initialized and trivially destructible, so that a free arriving after
/// the thread's pools were drained (a thread_local or static MPFR number destroyed late) still finds
/// them, and then goes to free.
struct gmp_block_pools {
  /// Sizes 8, 16, …, max_pooled_size bytes are pooled (an MPFR significand of up to about 4000 bits);
  /// other sizes go to malloc and free directly.
  static constexpr std::size_t granule = 8, max_pooled_size = 512, kept_per_size = 4096;
  struct free_block {
    free_block* next;
  };
  struct list_of {
    free_block* head;
    std::size_t count;
  };
  // A block must hold the list's link: sizes below a pointer's are not pooled.
  static_assert(granule >= sizeof(free_block));

  list_of lists[max_pooled_size / granule];
  bool drained;
  bool drain_registered;

  list_of* list_for(std::size_t size) {
    if (drained || size == 0 || size % granule != 0 || size > max_pooled_size) return nullptr;
    return &lists[size / granule - 1];
  }
  void drain() {
    drained = true;
    for (auto& list : lists) {
      while (list.head) {
        free_block* next = list.head->next;
        std::free(list.head);
        list.head = next;
      }
      list.count = 0;
    }
  }
};

inline thread_local constinit gmp_block_pools pools_of_this_thread{};

/// Drains this thread's pools when the thread ends (constructed on the thread's first allocation).
struct gmp_block_pools_drain {
  ~gmp_block_pools_drain() { pools_of_this_thread.drain(); }
};

/// Registers the drain of this thread's pools (once a thread; out of the allocation's hot path).
[[gnu::noinline, gnu::cold]] inline void register_gmp_block_pools_drain() {
  thread_local gmp_block_pools_drain drain_at_exit;
  (void)drain_at_exit;
  pools_of_this_thread.drain_registered = true;
}

inline void* gmp_pool_allocate(std::size_t size) {
  if (!pools_of_this_thread.drain_registered) [[unlikely]]
    register_gmp_block_pools_drain();
  if (auto* list = pools_of_this_thread.list_for(size); list && list->head) {
    gmp_block_pools::free_block* b = list->head;
    list->head = b->next;
    --list->count;
    return b;
  }
  void* p = std::malloc(size == 0 ? 1 : size);
  if (!p) {  // as GMP's own allocator does: its callers cannot handle a failure
    std::fprintf(stderr, "GMP: cannot allocate %zu bytes\n", size);
    std::abort();
  }
  return p;
}

inline void gmp_pool_free(void* p, std::size_t size) {
  if (!p) return;
  auto* list = pools_of_this_thread.list_for(size);
  if (!list || list->count >= gmp_block_pools::kept_per_size) {
    std::free(p);
    return;
  }
  auto* b = static_cast<gmp_block_pools::free_block*>(p);
  b->next = list->head;
  list->head = b;
  ++list->count;
}

inline void* gmp_pool_reallocate(void* p, std::size_t old_size, std::size_t new_size) {
  if (p && old_size == new_size) return p;
  void* q = gmp_pool_allocate(new_size);
  if (p) std::memcpy(q, p, old_size < new_size ? old_size : new_size);
  gmp_pool_free(p, old_size);
  return q;
}

}  // namespace detail

/// Installs the pools as GMP's memory functions (for MPFR and MPFI too). Call it first thing in main:
/// blocks allocated before are harmless (see above), but only blocks allocated after are pooled.
/// Under AddressSanitizer it installs nothing: a pooled block is never freed, so ASan could not see a
/// use after free of an MPFR number's limbs.
inline void install_gmp_block_pool() {
#if !KALMAN_ORACLE_ADDRESS_SANITIZER
  mp_set_memory_functions(&detail::gmp_pool_allocate, &detail::gmp_pool_reallocate, &detail::gmp_pool_free);
#endif
}

}  // namespace kalman_oracle
