// A model too large for the memory available is refused before anything is allocated,
// with a message that says how much its weights need and, in float32, that bfloat16
// needs half; the check reads the system's figure, and a block the system refuses to
// map says the same.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "model/weights.h"
#include "perf/memory.h"
#include "util/error.h"

namespace {

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(MemoryCheck, ShortfallSaysWhatIsNeededAndSuggestsBfloat16) {
  // GPT-2 XL's float32 weights on a machine with 4 GB free.
  const std::string f32 = ds::weights_memory_shortfall(size_t(6.2e9), size_t(4.0e9), ds::Precision::F32);
  EXPECT_TRUE(has(f32, "6.2 GB in float32")) << f32;
  EXPECT_TRUE(has(f32, "4.0 GB is available")) << f32;
  EXPECT_TRUE(has(f32, "bfloat16")) << f32;
  EXPECT_TRUE(has(f32, "3.1 GB")) << f32;
  const std::string bf16 = ds::weights_memory_shortfall(size_t(3.1e9), size_t(2.0e9), ds::Precision::BF16);
  EXPECT_TRUE(has(bf16, "3.1 GB in bfloat16")) << bf16;
  EXPECT_FALSE(has(bf16, "open it in bfloat16")) << bf16;
  // Enough memory, or nothing known: no refusal.
  EXPECT_EQ(ds::weights_memory_shortfall(size_t(3e9), size_t(4e9), ds::Precision::F32), "");
  EXPECT_EQ(ds::weights_memory_shortfall(size_t(4e9), size_t(4e9), ds::Precision::F32), "");
  EXPECT_EQ(ds::weights_memory_shortfall(size_t(6e9), 0, ds::Precision::F32), "");
}

TEST(MemoryCheck, AvailableMemoryIsReadFromTheSystem) {
  if (!std::filesystem::exists("/proc/meminfo")) GTEST_SKIP() << "no /proc/meminfo on this system";
  const size_t avail = ds::available_memory_bytes();
  EXPECT_GT(avail, size_t(16) << 20);
}

TEST(MemoryCheck, ALoaderRefusesWeightsLargerThanTheMemoryAvailable) {
  if (!std::filesystem::exists("/proc/meminfo")) GTEST_SKIP() << "no /proc/meminfo on this system";
  // A configuration whose float32 matrices need more than twice the memory available:
  // zeros() for a loader refuses it without mapping anything, naming bfloat16.
  ds::Config c;
  c.d_model = 1024;
  c.n_heads = 16;
  c.n_kv_heads = 16;
  c.d_head = 64;
  c.d_ff = 4096;
  c.max_seq = 64;
  c.vocab_size = 1000;
  // 12 * d^2 floats a layer (attention 4 d^2, MLP 8 d^2): 50 MB a layer.
  const double per_layer = 12.0 * 1024 * 1024 * 4;
  const double avail = double(ds::available_memory_bytes());
  ASSERT_GT(avail, 0);
  c.n_layers = int(2 * avail / per_layer) + 1;
  try {
    (void)ds::Weights::zeros(c, ds::Precision::F32, true);
    FAIL() << "weights of " << c.n_layers << " layers were not refused";
  } catch (const ds::Error& e) {
    EXPECT_TRUE(has(e.what(), "not enough memory for this model")) << e.what();
    EXPECT_TRUE(has(e.what(), "bfloat16")) << e.what();
  }
}

}  // namespace

// A weight block moved into huge pages in the background (perf/memory.h's HugePageJob)
// keeps every value, whether the job runs to the end or is stopped by its owner; where
// the system can collapse memory (Linux 6.1+, THP not "never"), page_share sees the
// block in huge pages afterwards.
TEST(MemoryCheck, HugePageJobKeepsTheBlockAndMovesItIntoHugePages) {
  const size_t n = size_t(24) << 20;  // floats: 96 MB, 48 huge pages
  auto fill = [&](float* p) {
    for (size_t i = 0; i < n; ++i) p[i] = float(i % 1000003);
  };
  auto intact = [&](const float* p) {
    for (size_t i = 0; i < n; ++i)
      if (p[i] != float(i % 1000003)) return false;
    return true;
  };
  {
    std::shared_ptr<void> block = ds::allocate_weight_block(n * sizeof(float));
    fill(static_cast<float*>(block.get()));
    const ds::PageShare before = ds::page_share(block.get(), 1);
    EXPECT_GE(before.resident, n * sizeof(float));
    {
      ds::HugePageJob job(block);
      job.wait();
    }
    EXPECT_TRUE(intact(static_cast<const float*>(block.get())));
    const ds::PageShare after = ds::page_share(block.get(), 1);
    EXPECT_GE(after.resident, n * sizeof(float));
    if (after.huge == 0)
      std::printf("[ note ] this system did not collapse the block into huge pages (THP off, or Linux < 6.1)\n");
    else
      EXPECT_GT(after.fraction(), 0.5) << after.huge << " of " << after.resident;
  }
  {  // stopped at once by its owner: joins, and the values are still all there
    std::shared_ptr<void> block = ds::allocate_weight_block(n * sizeof(float));
    fill(static_cast<float*>(block.get()));
    { ds::HugePageJob job(block); }
    EXPECT_TRUE(intact(static_cast<const float*>(block.get())));
  }
}
