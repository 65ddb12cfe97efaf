#pragma once
// Large buffers (weight matrices, the KV cache, the bandwidth probe's buffer) ask the
// kernel for transparent huge pages: decoding reads every weight once per token, and
// with 4 KB pages a token of a 500 MB model walks 120,000 page-table entries. On this
// project's test machine reads from huge pages run about 25% faster. Where THP is
// unavailable or disabled the advice is ignored.
#include <cstddef>
#include <memory>

namespace ds {

// A block for a model's large weight matrices: one anonymous mapping whose start is
// 2 MB-aligned, advised for huge pages before anything touches it, and zero-filled
// (as fresh mappings are). One mapping rather than one allocation per matrix means
// no 4 KB pages at the ends of each matrix (an allocation's header lands in the
// first 2 MB of its mapping and is written before any advice can apply), and the
// matrices can sit in the order a token reads them. The block is unmapped when the
// last owner lets go. Throws ds::Error when the memory is not available.
std::shared_ptr<void> allocate_weight_block(size_t bytes);

// Zero-initialised storage of `bytes`, aligned to 64 bytes, freed with the last owner.
std::shared_ptr<void> allocate_aligned(size_t bytes);

}  // namespace ds
