#pragma once
// Where the start of a run goes: loading a model timed whole (wall, user and system
// seconds of the process), beside the two costs every load pays and that can be
// measured apart in the same process:
//  * reading: the model's files copied once into memory that is already mapped (a
//    warm page cache makes this a copy out of the kernel's cache);
//  * faulting: fresh pages mapped in, one write per 4 KB page (the kernel finds and
//    zeroes each page, as a loader's first writes make it do), timed on a block of up to
//    256 MB before the load and scaled to the weights' bytes;
// and what remains of the load once those two are taken off: converting (tiles,
// 16-bit storage) and checking the values. A loader that overlaps faulting or reading
// with its own work on another thread can take less than the sum; the remainder is
// then shown as 0.
#include <cstdint>
#include <cstdio>
#include <string>

#include "io/loader.h"

namespace ds {

struct LoadSplit {
  double load_s = 0, load_user_s = 0, load_system_s = 0;  // the load itself
  double read_s = 0;                                      // the files read once
  double fault_s = 0;                                     // a block of the weights' size faulted in
  double rest_s = 0;                                      // load_s - read_s - fault_s, at least 0
  uint64_t file_bytes = 0, weight_bytes = 0;
  int files = 0;
  bool in_place = false;   // the matrices are the mapped file's pages (perf/mapped_file.h): nothing copied
  bool file_copy = false;  // the matrices are where the whole file was read into memory (MappedFile::copy)
};

// The CPU time of this process so far: user and system seconds.
void process_times(double& user_s, double& system_s);

// Reads the model's files once (which also warms the page cache), faults in a block
// of up to 256 MB and lets it go, then loads the model into `out` timing it. Throws ds::Error
// as load_model does.
LoadSplit measure_load(const std::string& path, const std::string& tokenizer, Precision p, LoadedModel& out,
                       bool in_place = true);

void print_load_split(std::FILE* f, const LoadSplit& s);

}  // namespace ds
