// A checkpoint that is cut short while it is being read: the loader ends in a ds::Error
// naming the file, never a crash or a hang (issue 17). The checkpoint is truncated on
// another thread at a moment that varies from attempt to attempt, so some attempts cut
// it before the size check, some during the reading and some after; every outcome must
// be a loaded model or a clear error.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "helpers.h"
#include "io/llama2c.h"
#include "model/weights.h"
#include "util/error.h"

namespace ds::test {
namespace {

TEST(LoadTruncated, Llama2cCutWhileReadingEndsInAnErrorNamingTheFile) {
  TempDir dir;
  const std::string good = dir.path("good.bin"), path = dir.path("cut.bin");
  const Config c = llama2c_config(256, 768, 4, 8, 8, 4096, 256, true);
  save_llama2c(good, c, Weights::random(c, 7));
  const auto full = std::filesystem::file_size(good);
  int errors = 0, loaded = 0;
  for (int attempt = 0; attempt < 12; ++attempt) {
    std::filesystem::copy_file(good, path, std::filesystem::copy_options::overwrite_existing);
    std::thread cutter([&] {
      std::this_thread::sleep_for(std::chrono::microseconds(200 * attempt));
      ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(full / 2)), 0);
    });
    const std::string e = error_of([&] { load_llama2c(path); });
    cutter.join();
    if (e.empty()) {
      ++loaded;
    } else {
      ++errors;
      EXPECT_TRUE(contains(e, path)) << e;
    }
  }
  EXPECT_EQ(errors + loaded, 12);
  // Cut before the load starts: always an error naming the file.
  EXPECT_TRUE(contains(error_of([&] { load_llama2c(path); }), path));
}

}  // namespace
}  // namespace ds::test
