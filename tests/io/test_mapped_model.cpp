// Models used in place in their mapped file (perf/mapped_file.h): a float32 llama2.c
// checkpoint and a float32 model folder in decoderscope's format. Their values must be
// those of a copy read into memory; a file cut short or rewritten while the model is
// open must end the next forward pass in a ds::Error naming the file (never a crash
// from SIGBUS, never silently changed weights); a file replaced by renaming a new one
// over it leaves the open model as it was.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "helpers.h"
#include "io/llama2c.h"
#include "io/loader.h"
#include "io/model_folder.h"
#include "model/config.h"
#include "model/model.h"
#include "perf/mapped_file.h"
#include "perf/memory.h"
#include "util/error.h"

namespace ds::test {
namespace {

// The logits of a few greedy steps (ids fixed, so both engines see the same input).
std::vector<float> logits_of(const std::shared_ptr<const Model>& m, int steps) {
  Engine e(m);
  std::vector<float> out;
  for (int i = 0; i < steps; ++i) {
    const int id = (i * 7 + 3) % m->cfg.vocab_size;
    auto l = e.forward(std::span<const int>(&id, 1));
    out.insert(out.end(), l.data(), l.data() + l.size());
  }
  return out;
}

// The error of the next forward pass of an engine, or "" when it ran.
std::string next_step_error(Engine& e) {
  const int id = 1;
  return error_of([&] { e.forward(std::span<const int>(&id, 1)); });
}

Config small_llama() { return llama2c_config(64, 160, 3, 4, 2, 300, 64, true); }

// A small checkpoint of random weights written to path, then opened as the app and
// the CLI open it (in place).
LoadedModel saved_and_opened(const std::string& path, uint64_t seed) {
  save_llama2c(path, small_llama(), Weights::random(small_llama(), seed));
  return load_model(path);
}

TEST(MappedModel, Llama2cInPlaceGivesTheLogitsOfACopy) {
  TempDir tmp;
  const std::string path = tmp.path("m.bin");
  save_llama2c(path, small_llama(), Weights::random(small_llama(), 21));
  const LoadedModel mapped = load_model(path);
  ASSERT_NE(mapped.model->w.mapped, nullptr);
  EXPECT_FALSE(const_cast<Weights&>(mapped.model->w).in_tiles());
  Llama2cModel copy = load_llama2c(path);  // read into memory, row-major
  ASSERT_EQ(copy.w.mapped, nullptr);
  const auto copied = std::make_shared<const Model>(copy.cfg, std::move(copy.w));
  EXPECT_EQ(logits_of(mapped.model, 5), logits_of(copied, 5));
  // 16-bit precisions are read into memory as before.
  EXPECT_EQ(load_model(path, "", Precision::BF16).model->w.mapped, nullptr);
}

// A file the page cache holds in 4 KB pages (written 4 KB at a time, then flushed) is
// read into 2 MB folios in the background once opened in place (perf/memory.h's
// HugePageJob): the steps taken while the job runs and after it give the logits of a
// copy in memory, and afterwards the weights sit in huge pages where the system gives
// files 2 MB folios.
TEST(MappedModel, FileInSmallPagesIsReadIntoHugePagesWithItsValues) {
  TempDir tmp;
  const Config c = llama2c_config(256, 768, 4, 4, 4, 4000, 64, true);  // about 18 MB
  const std::string written = tmp.path("w.bin"), path = tmp.path("m.bin");
  save_llama2c(written, c, Weights::random(c, 5));
  {
    std::ifstream in(written, std::ios::binary);
    std::ofstream out(path, std::ios::binary);
    std::vector<char> piece(4096);
    while (in.read(piece.data(), std::streamsize(piece.size())) || in.gcount() > 0)
      out.write(piece.data(), in.gcount()), out.flush();
  }
  ::sync();  // clean pages, which the cache can drop
  Llama2cModel copy = load_llama2c(path);
  const auto copied = std::make_shared<const Model>(copy.cfg, std::move(copy.w));
  const std::vector<float> want = logits_of(copied, 6);

  const LoadedModel mapped = load_model(path);
  ASSERT_NE(mapped.model->w.mapped, nullptr);
  ASSERT_NE(mapped.model->huge_pages, nullptr);
  EXPECT_EQ(logits_of(mapped.model, 6), want);  // while the job runs
  const double seconds = mapped.model->huge_pages->wait();
  EXPECT_EQ(logits_of(mapped.model, 6), want);
  const PageShare after = page_share(mapped.model->w.mapped->data(), mapped.model->w.mapped->size());

  // Whether this system gives files 2 MB folios at all: the other file, dropped from
  // the cache and read again through a mapping.
  const int fd = ::open(written.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  const auto control = MappedFile::map(fd, size_t(std::filesystem::file_size(written)), written);
  ::close(fd);
  volatile char sink = 0;
  for (size_t i = 0; i < control->size(); i += 4096) sink = char(sink + control->data()[i]);
  const double possible = page_share(control->data(), control->size()).fraction();
  if (possible < 0.5)
    GTEST_SKIP() << "this system keeps files in small pages (a file read afresh through a mapping: "
                 << int(100 * possible) << "% in huge pages; transparent huge pages off, or a file system "
                 << "without large folios)";
  EXPECT_GE(seconds, 0.0) << "the job did not run";
  // The same share as the file read afresh (a file's last 2 MB, cut short, stays in
  // small pages), give or take a piece the steps faulted back in while the job read it.
  EXPECT_GE(after.fraction(), possible - 0.12) << "a file read afresh: " << possible;
}

TEST(MappedModel, Llama2cCutShortWhileOpenEndsTheNextStepInAnError) {
  TempDir tmp;
  const std::string path = tmp.path("m.bin");
  const LoadedModel m = saved_and_opened(path, 22);
  Engine e(m.model);
  ASSERT_EQ(next_step_error(e), "");
  ASSERT_EQ(::truncate(path.c_str(), 4096), 0);
  // The next step reads pages past the file's new end: the SIGBUS is caught, the
  // step ends in an error saying what happened.
  const std::string err = next_step_error(e);
  EXPECT_TRUE(contains(err, path) && contains(err, "cut short")) << err;
  EXPECT_TRUE(contains(next_step_error(e), "open the model again"));
  // A new engine on the same model says the same at its first step.
  Engine again(m.model);
  EXPECT_TRUE(contains(next_step_error(again), path));
}

TEST(MappedModel, Llama2cRewrittenInPlaceEndsTheNextStepInAnError) {
  TempDir tmp;
  const std::string path = tmp.path("m.bin");
  const LoadedModel m = saved_and_opened(path, 23);
  Engine e(m.model);
  ASSERT_EQ(next_step_error(e), "");
  // File times may be as coarse as a scheduler tick: let one pass.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const std::string other = tmp.path("other.bin");
  save_llama2c(other, small_llama(), Weights::random(small_llama(), 24));
  const std::string bytes = read_file(other);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);  // same inode, same size
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  const std::string err = next_step_error(e);
  EXPECT_TRUE(contains(err, path) && contains(err, "was changed")) << err;
}

TEST(MappedModel, Llama2cReplacedByRenameKeepsTheOpenModel) {
  TempDir tmp;
  const std::string path = tmp.path("m.bin");
  const LoadedModel m = saved_and_opened(path, 25);
  const std::vector<float> before = logits_of(m.model, 4);
  // save_llama2c writes a new file and renames it over the old one.
  save_llama2c(path, small_llama(), Weights::random(small_llama(), 26));
  EXPECT_EQ(logits_of(m.model, 4), before);
  EXPECT_NE(logits_of(load_model(path).model, 4), before);
}

TEST(MappedModel, OwnFolderInPlaceMatchesACopyAndNamesACutFile) {
  TempDir tmp;
  const std::string dir = tmp.sub("gpt");
  const Config c = gpt2_config(64, 2, 4, 64, 90);
  nlohmann::json vocab = nlohmann::json::array();
  for (int i = 0; i < c.vocab_size; ++i) vocab.push_back(std::string(1, char('!' + i)));
  save_model_folder(dir, c, Weights::random(c, 27), {{"kind", "chars"}, {"vocab", vocab}});
  const LoadedModel mapped = load_model(dir);
  ASSERT_NE(mapped.model->w.mapped, nullptr);
  FolderModel copy = load_model_folder(dir);
  ASSERT_EQ(copy.w.mapped, nullptr);
  const auto copied = std::make_shared<const Model>(copy.cfg, std::move(copy.w));
  EXPECT_EQ(logits_of(mapped.model, 5), logits_of(copied, 5));

  Engine e(mapped.model);
  ASSERT_EQ(next_step_error(e), "");
  const std::string st = (std::filesystem::path(dir) / "model.safetensors").string();
  ASSERT_EQ(::truncate(st.c_str(), 4096), 0);
  const std::string err = next_step_error(e);
  EXPECT_TRUE(contains(err, st) && contains(err, "cut short")) << err;
}

}  // namespace
}  // namespace ds::test
