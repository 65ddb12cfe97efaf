#pragma once
// Large buffers (weight matrices, the KV cache, the bandwidth probe's buffer) are
// anonymous mappings that may be given transparent huge pages: decoding reads every
// weight once per token, and with 4 KB pages a token of a 500 MB model walks 120,000
// page-table entries.
//
// When huge pages come matters. With the kernel's usual THP settings (enabled=madvise,
// defrag=madvise) every first touch of an advised region asks for a 2 MB page there and
// then, compacting memory synchronously when none is free and zeroing 2 MB per fault;
// loading a 440 MB checkpoint into advised memory cost 0.6-2 s of system time (README,
// "Start"). So the weights are written into plain 4 KB pages (no compaction, ever) and
// moved into huge pages afterwards, off the loading thread (HugePageJob): decoding
// reads 2 MB pages 12-25% faster than 4 KB ones on the README's machine (README,
// "Huge pages"). The KV cache, written a position at a time, stays in 4 KB pages.
// Where THP is unavailable or disabled all of this is skipped or ignored.
#include <cstddef>
#include <memory>

#include "perf/mapped_file.h"

namespace ds {

enum class HugePages {
  AfterWrite,    // no advice until advise_huge_pages(): first touches never compact
  AtFirstTouch,  // advised before the first touch: each 2 MB faults in as one huge page
};

// A block for a model's large weight matrices: one anonymous mapping whose start is
// 2 MB-aligned, advised for huge pages as `when` says, and zero-filled
// (as fresh mappings are). One mapping rather than one allocation per matrix means
// no 4 KB pages at the ends of each matrix (an allocation's header lands in the
// first 2 MB of its mapping and is written before any advice can apply), and the
// matrices can sit in the order a token reads them. The block is unmapped when the
// last owner lets go. Throws ds::Error when the memory is not available.
std::shared_ptr<void> allocate_weight_block(size_t bytes, HugePages when = HugePages::AfterWrite);

// Advises a block from allocate_weight_block for huge pages, once its contents are
// written: the pages already there stay as they are (the kernel's khugepaged may merge
// them later, on its own time), nothing is compacted now. Does nothing for null or for
// other storage; returns whether the advice was given.
bool advise_huge_pages(const std::shared_ptr<void>& block);

// Moves a written block from allocate_weight_block into huge pages on a thread of its
// own, 2 MB at a time (Linux 6.1's MADV_COLLAPSE: the kernel copies each 2 MB into a
// huge page and swaps the mapping; readers meanwhile see the same values), paced to a
// quarter of one core at a lower priority until wait() is called, which lets it run at
// full speed. The load stays in 4 KB pages and never waits for compaction; decoding
// then reads the weights at the huge-page rate, 12-25% faster on the machine of the
// README's figures. Where MADV_COLLAPSE is unavailable the block is only advised
// (advise_huge_pages). The destructor stops between pieces and joins; the job keeps
// the block alive until then.
//
// For a file used in place, the same job reads the mapped file into the page cache's 2
// MB folios, piece by piece (MappedFile::reread_piece), when less than 90% of it is in
// huge pages once loaded; it gives up after 64 MB when the system gives the file no
// 2 MB folios.
class HugePageJob {
 public:
  explicit HugePageJob(std::shared_ptr<void> block);
  explicit HugePageJob(std::shared_ptr<const MappedFile> file);
  ~HugePageJob();
  HugePageJob(const HugePageJob&) = delete;
  HugePageJob& operator=(const HugePageJob&) = delete;
  // Lifts the pacing and blocks until the whole block has been handled; returns the
  // job's seconds, or -1 when it was skipped from the start.
  double wait();

 private:
  struct State;
  std::shared_ptr<State> s_;
  void start();
};

// The pages of the mappings that overlap [p, p + bytes), from /proc/self/smaps: how many
// bytes are resident and how many of those sit in huge pages (anonymous, or a file's
// 2 MB folios mapped whole). Counts are per mapping, so a mapping that only partly
// overlaps counts whole. All zero where smaps cannot be read.
struct PageShare {
  size_t resident = 0;
  size_t huge = 0;
  double fraction() const { return resident ? double(huge) / double(resident) : 0.0; }
};
PageShare page_share(const void* p, size_t bytes);

// Maps in, ready for writing, the whole pages inside [p, p + bytes) that are not mapped
// yet, without writing to them (Linux 5.14's MADV_POPULATE_WRITE): the page faults a
// loader's first writes would take, taken in one call. Returns false where that is not
// supported or the memory is not available (the writes then fault as usual).
bool populate_for_write(void* p, size_t bytes);

// The memory the system could give this process now without swapping (Linux's
// MemAvailable), in bytes; 0 when it cannot be read.
size_t available_memory_bytes();

// Zero-initialised storage of `bytes`, aligned to 64 bytes, freed with the last owner.
std::shared_ptr<void> allocate_aligned(size_t bytes);

}  // namespace ds
