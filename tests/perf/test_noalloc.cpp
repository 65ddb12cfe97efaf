// The decode hot path (Engine::forward with one token, no hooks subscribed) must not
// touch the heap once the engine is warm.
//
// This file replaces the global operator new/delete of the test executable with
// counting versions. Eigen allocates with std::malloc rather than operator new, so on
// glibc malloc/calloc/realloc/memalign are replaced too (forwarding to glibc's own
// __libc_* functions). Counting happens only while g_counting is set, i.e. inside the
// measured region; everything else (gtest included) allocates as usual.
//
// Skipped under AddressSanitizer, which replaces operator new and malloc itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <new>
#include <vector>

#include "helpers.h"  // DS_TEST_ASAN
#include "model/config.h"
#include "model/model.h"
#include "model/weights.h"

#ifndef DS_TEST_ASAN

#if defined(__GLIBC__)
#include <execinfo.h>
#define DS_TEST_BACKTRACE 1
#endif

namespace {
std::atomic<bool> g_counting{false};
std::atomic<long> g_allocs{0};
#ifdef DS_TEST_BACKTRACE
// Call stacks of the first kStacks counted allocations, printed when the test fails.
constexpr int kStacks = 128, kDepth = 16;
void* g_stack[kStacks][kDepth];
int g_stack_len[kStacks];
std::atomic<bool> g_in_backtrace{false};
#endif
inline void note_alloc() {
  if (!g_counting.load(std::memory_order_relaxed)) return;
  const long i = g_allocs.fetch_add(1, std::memory_order_relaxed);
#ifdef DS_TEST_BACKTRACE
  if (i < kStacks && !g_in_backtrace.exchange(true)) {
    g_stack_len[i] = backtrace(g_stack[i], kDepth);
    g_in_backtrace.store(false);
  }
#else
  (void)i;
#endif
}
// Prints each distinct stack once with how often it was seen (among the first kStacks).
void print_stacks(long n) {
#ifdef DS_TEST_BACKTRACE
  const int m = int(n < kStacks ? n : kStacks);
  for (int i = 0; i < m; ++i) {
    bool seen = false;
    int count = 0;
    for (int j = 0; j < m; ++j) {
      const bool same =
          g_stack_len[i] == g_stack_len[j] && std::equal(g_stack[i], g_stack[i] + g_stack_len[i], g_stack[j]);
      if (same && j < i) seen = true;
      if (same) ++count;
    }
    if (seen) continue;
    std::fprintf(stderr, "---- allocation stack (%d of the first %d allocations):\n", count, m);
    std::fflush(stderr);
    backtrace_symbols_fd(g_stack[i], g_stack_len[i], 2);
  }
#else
  (void)n;
#endif
}
// backtrace() loads the unwinder (and allocates) on first use: do that up front.
void warm_backtrace() {
#ifdef DS_TEST_BACKTRACE
  void* buf[4];
  (void)backtrace(buf, 4);
#endif
}
}  // namespace

#if defined(__GLIBC__)
extern "C" {
void* __libc_malloc(size_t);
void __libc_free(void*);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);

void* malloc(size_t n) noexcept {
  note_alloc();
  return __libc_malloc(n);
}
void free(void* p) noexcept { __libc_free(p); }
void* calloc(size_t a, size_t b) noexcept {
  note_alloc();
  return __libc_calloc(a, b);
}
void* realloc(void* p, size_t n) noexcept {
  note_alloc();
  return __libc_realloc(p, n);
}
void* memalign(size_t a, size_t n) noexcept {
  note_alloc();
  return __libc_memalign(a, n);
}
void* aligned_alloc(size_t a, size_t n) noexcept {
  note_alloc();
  return __libc_memalign(a, n);
}
int posix_memalign(void** out, size_t a, size_t n) noexcept {
  note_alloc();
  if (a < sizeof(void*) || (a & (a - 1)) != 0) return EINVAL;
  void* p = __libc_memalign(a, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
}  // extern "C"
#define DS_RAW_MALLOC __libc_malloc
#define DS_RAW_FREE __libc_free
#define DS_RAW_MEMALIGN(a, n) __libc_memalign((a), (n))
#else
#define DS_RAW_MALLOC std::malloc
#define DS_RAW_FREE std::free
#define DS_RAW_MEMALIGN(a, n) std::aligned_alloc((a), ((n) + (a)-1) / (a) * (a))
#endif

namespace {
void* counted_new(std::size_t n) {
  note_alloc();
  void* p = DS_RAW_MALLOC(n ? n : 1);
  if (!p) throw std::bad_alloc();
  return p;
}
void* counted_new_aligned(std::size_t n, std::align_val_t al) {
  note_alloc();
  std::size_t a = static_cast<std::size_t>(al);
  if (a < sizeof(void*)) a = sizeof(void*);
  void* p = DS_RAW_MEMALIGN(a, n ? n : 1);
  if (!p) throw std::bad_alloc();
  return p;
}
}  // namespace

void* operator new(std::size_t n) { return counted_new(n); }
void* operator new[](std::size_t n) { return counted_new(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return counted_new(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return counted_new(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new(std::size_t n, std::align_val_t a) { return counted_new_aligned(n, a); }
void* operator new[](std::size_t n, std::align_val_t a) { return counted_new_aligned(n, a); }
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  try {
    return counted_new_aligned(n, a);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  try {
    return counted_new_aligned(n, a);
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* p) noexcept { DS_RAW_FREE(p); }
void operator delete[](void* p) noexcept { DS_RAW_FREE(p); }
void operator delete(void* p, std::size_t) noexcept { DS_RAW_FREE(p); }
void operator delete[](void* p, std::size_t) noexcept { DS_RAW_FREE(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { DS_RAW_FREE(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { DS_RAW_FREE(p); }
void operator delete(void* p, std::align_val_t) noexcept { DS_RAW_FREE(p); }
void operator delete[](void* p, std::align_val_t) noexcept { DS_RAW_FREE(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { DS_RAW_FREE(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { DS_RAW_FREE(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { DS_RAW_FREE(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { DS_RAW_FREE(p); }

#endif  // DS_TEST_ASAN

namespace {

struct NoAllocCase {
  const char* name;
  ds::Config cfg;
};

[[maybe_unused]] std::vector<NoAllocCase> cases() {
  ds::Config base;
  base.d_model = 32;
  base.n_layers = 2;
  base.n_heads = 4;
  base.n_kv_heads = 4;
  base.d_head = 8;
  base.d_ff = 64;
  base.vocab_size = 40;
  base.max_seq = 80;
  base.max_src = 32;
  std::vector<NoAllocCase> out;
  out.push_back({"gpt2", base});
  {
    ds::Config c = base;
    c.norm = ds::NormKind::RMSNorm;
    c.pos = ds::PosKind::Rotary;
    c.ffn = ds::FFNKind::SwiGLU;
    c.n_kv_heads = 2;
    c.tied_head = false;
    c.attn_bias = c.ffn_bias = c.norm_bias = false;
    out.push_back({"llama", c});
  }
  {
    ds::Config c = base;
    c.encoder_decoder = true;
    c.n_enc_layers = 2;
    c.norm_place = ds::NormPlace::Post;
    c.final_norm = c.enc_final_norm = false;
    c.pos = ds::PosKind::Sinusoidal;
    c.ffn = ds::FFNKind::ReLU;
    c.pad_id = 0;
    out.push_back({"encdec_original", c});
  }
  return out;
}

TEST(NoAlloc, DecodeStepDoesNotAllocate) {
#ifdef DS_TEST_ASAN
  GTEST_SKIP() << "AddressSanitizer replaces operator new; allocation counting is off";
#else
  for (const auto& c : cases()) {
    SCOPED_TRACE(c.name);
    auto model = std::make_shared<const ds::Model>(c.cfg, ds::Weights::random(c.cfg, 21));
    ds::Engine e(model);
    if (c.cfg.encoder_decoder) {
      const std::vector<int> src = {3, 4, 5, 6, 7, 8, 9, 0, 0};
      e.encode(src);
    }
    std::vector<int> toks(40);
    for (size_t i = 0; i < toks.size(); ++i) toks[i] = int((i * 7 + 3) % size_t(c.cfg.vocab_size));
    // Warm up: a prefill and a few decode steps.
    e.forward(std::span<const int>(toks.data(), 8), false);
    for (int i = 8; i < 12; ++i) e.forward(std::span<const int>(&toks[size_t(i)], 1));
    ASSERT_TRUE(e.hooks().empty());

    float sink = 0.0f;
    warm_backtrace();
    g_allocs.store(0);
    g_counting.store(true);
    for (int i = 12; i < 32; ++i) {
      auto l = e.forward(std::span<const int>(&toks[size_t(i)], 1));
      sink += l(0, 0);
    }
    g_counting.store(false);
    const long n = g_allocs.load();
    EXPECT_EQ(n, 0) << "heap allocations in 20 decode steps";
    if (n != 0) print_stacks(n);
    EXPECT_EQ(e.pos(), 32);
    EXPECT_TRUE(std::isfinite(sink));
  }
#endif
}

// The counter itself works (so a 0 above means something).
TEST(NoAlloc, CounterSeesAllocations) {
#ifdef DS_TEST_ASAN
  GTEST_SKIP() << "AddressSanitizer replaces operator new; allocation counting is off";
#else
  g_allocs.store(0);
  g_counting.store(true);
  auto* p = new std::vector<int>(100);
  ds::MatRM m(17, 13);
  m.setZero();
  g_counting.store(false);
  const long n = g_allocs.load();
  delete p;
  EXPECT_GE(n, 3) << "operator new (x2) and Eigen's malloc";
  EXPECT_EQ(m.sum(), 0.0f);
#endif
}

}  // namespace
