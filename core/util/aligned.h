#pragma once
// Vectors whose storage starts on a cache line (64 bytes). The products' kernels read
// their input vectors with 256- and 512-bit loads, once per weight row: from storage
// that malloc placed 16 or 48 bytes past a line, every 512-bit load spans two lines.
// On the 1B model's decode steps that made each quantized row 1-3% slower, depending on
// where the heap happened to put the engine's vectors (README "A decode step beyond its
// products").
#include <cstddef>
#include <new>
#include <vector>

namespace ds {

inline constexpr std::size_t kCacheLine = 64;

template <class T>
struct CacheAligned {
  using value_type = T;
  CacheAligned() noexcept = default;
  template <class U>
  CacheAligned(const CacheAligned<U>&) noexcept {}
  T* allocate(std::size_t n) {
    if (n > std::size_t(-1) / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(kCacheLine)));
  }
  void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, std::align_val_t(kCacheLine)); }
  template <class U>
  bool operator==(const CacheAligned<U>&) const noexcept {
    return true;
  }
};

template <class T>
using AlignedVector = std::vector<T, CacheAligned<T>>;

}  // namespace ds
