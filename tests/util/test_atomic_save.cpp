// Atomic saves (util/atomic_file.h): a save that fails at any byte, or at any rename,
// leaves the previous file or folder byte for byte and no temporary file behind; a
// save that succeeds replaces it. Every save of the project goes through them: trace
// JSON, safetensors, model folders, llama2.c checkpoints; and train --out refuses a
// folder that holds a finished model unless --force is given.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "helpers.h"
#include "io/llama2c.h"
#include "io/model_folder.h"
#include "probe/trace.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace {

namespace fs = std::filesystem;
using ds::test::read_file;
using ds::test::TempDir;

// Turns the injected failures off however a test ends.
struct NoFailures {
  NoFailures() { ds::clear_save_failures(); }
  ~NoFailures() { ds::clear_save_failures(); }
};

std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xFF);
  return s;
}

// Every file under dir (relative path -> bytes; folders as "<dir>").
std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> m;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const std::string rel = fs::relative(e.path(), dir).string();
    m[rel] = e.is_directory() ? "<dir>" : read_file(e.path());
  }
  return m;
}

// The names in dir.
std::vector<std::string> names(const fs::path& dir) {
  std::vector<std::string> v;
  for (const auto& e : fs::directory_iterator(dir)) v.push_back(e.path().filename().string());
  std::sort(v.begin(), v.end());
  return v;
}

using ds::test::contains;
using ds::test::error_of;

// The new content, written in pieces through both interfaces: raw writes of a large
// block and a few small ones, and text through the buffered stream.
void write_new(ds::SaveFile& f, const std::string& block) {
  f.write(block.data(), block.size() / 2);
  f.stream() << "between the halves " << 42 << '\n';
  f.write(block.data() + block.size() / 2, block.size() - block.size() / 2);
  for (int i = 0; i < 20000; ++i) f.stream() << 'x';  // more than the stream's buffer holds
}

size_t new_size(const std::string& block) {
  return block.size() + std::string("between the halves 42\n").size() + 20000;
}

}  // namespace

TEST(AtomicSave, InterruptedFileSaveLeavesTheOldFileAndNoTemporaryFile) {
  NoFailures guard;
  TempDir tmp;
  const std::string path = tmp.path("data.bin");
  const std::string old = random_bytes(10000, 1), block = random_bytes(300000, 2);
  const size_t total = new_size(block);
  for (int64_t at : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{4096}, int64_t{150000}, int64_t{300010},
                     static_cast<int64_t>(total) - 1}) {
    SCOPED_TRACE(at);
    tmp.write("data.bin", old);
    ds::fail_writes_after(at);
    const std::string m = error_of([&] { ds::save_file(path, [&](ds::SaveFile& f) { write_new(f, block); }); });
    ds::clear_save_failures();
    EXPECT_TRUE(contains(m, path) && contains(m, "No space left on device") && contains(m, "unchanged")) << m;
    EXPECT_EQ(read_file(path), old);
    EXPECT_EQ(names(tmp.dir()), std::vector<std::string>{"data.bin"});
  }
  // With the limit at the last byte, the save goes through.
  ds::fail_writes_after(static_cast<int64_t>(total));
  ds::save_file(path, [&](ds::SaveFile& f) { write_new(f, block); });
  ds::clear_save_failures();
  std::string want = block.substr(0, block.size() / 2) + "between the halves 42\n" + block.substr(block.size() / 2) +
                     std::string(20000, 'x');
  EXPECT_EQ(read_file(path), want);
  EXPECT_EQ(names(tmp.dir()), std::vector<std::string>{"data.bin"});
}

TEST(AtomicSave, FailuresOtherThanWritesAlsoLeaveTheOldFile) {
  NoFailures guard;
  TempDir tmp;
  const std::string path = tmp.write("a.txt", "old");
  // The code producing the bytes throws: its exception passes, unchanged.
  EXPECT_THROW(ds::save_file(path,
                             [](ds::SaveFile& f) {
                               f.write("new new new");
                               throw std::logic_error("producer failed");
                             }),
               std::logic_error);
  EXPECT_EQ(read_file(path), "old");
  // The final rename fails.
  ds::fail_renames_after(0);
  const std::string m = error_of([&] { ds::save_file(path, "new"); });
  ds::clear_save_failures();
  EXPECT_TRUE(contains(m, path) && contains(m, "Input/output error")) << m;
  EXPECT_EQ(read_file(path), "old");
  EXPECT_EQ(names(tmp.dir()), std::vector<std::string>{"a.txt"});
  // A new file that fails is not created at all.
  ds::fail_writes_after(2);
  EXPECT_NE(error_of([&] { ds::save_file(tmp.path("b.txt"), "12345"); }), "");
  ds::clear_save_failures();
  EXPECT_EQ(names(tmp.dir()), std::vector<std::string>{"a.txt"});
}

TEST(AtomicSave, SuccessfulSaveReplacesTheFileKeepsItsModeAndFollowsLinks) {
  NoFailures guard;
  TempDir tmp;
  const std::string path = tmp.write("a.txt", "old contents, longer than the new");
  ::chmod(path.c_str(), 0640);
  ds::save_file(path, "new");
  EXPECT_EQ(read_file(path), "new");
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
  // Through a symbolic link: the file it points to is replaced, the link stays.
  fs::create_symlink(path, tmp.dir() / "link.txt");
  ds::save_file(tmp.path("link.txt"), "via link");
  EXPECT_TRUE(fs::is_symlink(tmp.dir() / "link.txt"));
  EXPECT_EQ(read_file(path), "via link");
  EXPECT_EQ(names(tmp.dir()), (std::vector<std::string>{"a.txt", "link.txt"}));
  // Something that is no regular file is written in place; a folder is refused.
  EXPECT_NO_THROW(ds::save_file("/dev/null", "discarded"));
  EXPECT_TRUE(contains(error_of([&] { ds::save_file(tmp.dir().string(), "x"); }), "folder"));
  EXPECT_TRUE(contains(error_of([&] { ds::save_file(tmp.path("no/such/dir/x"), "x"); }), "does not exist"));
}

namespace {

// The folder the folder tests replace: two files the save writes, one it does not, a
// sub-folder.
void make_old_folder(const fs::path& d) {
  fs::create_directories(d / "sub");
  std::ofstream(d / "config.json") << "{\"old\": true}";
  std::ofstream(d / "model.safetensors", std::ios::binary) << random_bytes(5000, 3);
  std::ofstream(d / "README") << "notes the user wrote";
  std::ofstream(d / "sub" / "x") << "x";
}

void fill_new(const std::string& temp, const std::string& weights) {
  ds::save_file(temp + "/model.safetensors", weights);
  ds::save_file(temp + "/config.json", "{\"new\": true}");
}

}  // namespace

TEST(AtomicSave, InterruptedFolderSaveLeavesTheOldFolder) {
  NoFailures guard;
  TempDir tmp;
  const fs::path d = tmp.dir() / "model";
  make_old_folder(d);
  const auto before = snapshot(d);
  const std::string weights = random_bytes(70000, 4);
  const int64_t total = static_cast<int64_t>(weights.size()) + 13;
  for (int64_t at : {int64_t{0}, int64_t{1}, int64_t{65536}, int64_t{70000}, total - 1}) {
    SCOPED_TRACE(at);
    ds::fail_writes_after(at);
    const std::string m =
        error_of([&] { ds::save_folder(d.string(), [&](const std::string& t) { fill_new(t, weights); }); });
    ds::clear_save_failures();
    EXPECT_TRUE(contains(m, "No space left on device") && contains(m, "unchanged")) << m;
    // The message names the file where it was going, not the temporary folder.
    EXPECT_TRUE(contains(m, d.string() + "/")) << m;
    EXPECT_FALSE(contains(m, ".tmp-")) << m;
    EXPECT_EQ(snapshot(d), before);
    EXPECT_EQ(names(tmp.dir()), std::vector<std::string>{"model"});
  }
  // Every rename the save makes, failed in turn: the files' own renames in the new
  // folder, carrying README and sub over, moving the old folder aside, moving the new one in.
  int failed_at = 0;
  for (;; ++failed_at) {
    SCOPED_TRACE(failed_at);
    ASSERT_LT(failed_at, 20);
    ds::fail_renames_after(failed_at);
    const std::string m =
        error_of([&] { ds::save_folder(d.string(), [&](const std::string& t) { fill_new(t, weights); }); });
    ds::clear_save_failures();
    if (m.empty()) break;
    EXPECT_TRUE(contains(m, "Input/output error")) << m;
    EXPECT_EQ(snapshot(d), before);
    EXPECT_EQ(names(tmp.dir()), std::vector<std::string>{"model"});
  }
  EXPECT_EQ(failed_at, 6);  // 2 files + 2 carried entries + aside + in
  // The save that went through: new files, the user's files kept, nothing hidden left.
  auto after = snapshot(d);
  EXPECT_EQ(after["config.json"], "{\"new\": true}");
  EXPECT_EQ(after["model.safetensors"], weights);
  EXPECT_EQ(after["README"], "notes the user wrote");
  EXPECT_EQ(after["sub/x"], "x");
  EXPECT_EQ(after.size(), 5u);
  EXPECT_EQ(names(tmp.dir()), std::vector<std::string>{"model"});
}

TEST(AtomicSave, NewFolderIsCreatedWholeOrNotAtAll) {
  NoFailures guard;
  TempDir tmp;
  const fs::path d = tmp.dir() / "a" / "b" / "model";
  ds::fail_writes_after(20);
  EXPECT_NE(
      error_of([&] { ds::save_folder(d.string(), [&](const std::string& t) { fill_new(t, "0123456789abcdef"); }); }),
      "");
  ds::clear_save_failures();
  EXPECT_FALSE(fs::exists(d));
  EXPECT_TRUE(names(d.parent_path()).empty());
  ds::save_folder(d.string() + "/", [&](const std::string& t) { fill_new(t, "weights"); });
  EXPECT_EQ(read_file(d / "model.safetensors"), "weights");
  EXPECT_EQ(names(d.parent_path()), std::vector<std::string>{"model"});
  // A file where the folder should be is refused.
  const std::string file = tmp.write("plain", "p");
  EXPECT_TRUE(contains(error_of([&] { ds::save_folder(file, [&](const std::string&) {}); }), "not a folder"));
}

namespace {

ds::Config tiny() { return ds::test::tiny_llama_config(); }

nlohmann::json chars_tokenizer(int n) {
  nlohmann::json v = nlohmann::json::array();
  for (int i = 0; i < n; ++i) v.push_back(std::string(1, char('!' + i)));
  return {{"kind", "chars"}, {"vocab", v}};
}

}  // namespace

// The project's own saves go through the helper: a model folder, a llama2.c checkpoint
// and a trace, each interrupted at several offsets, stay as they were.
TEST(AtomicSave, ModelFolderLlama2cAndTraceSavesAreAtomic) {
  NoFailures guard;
  TempDir tmp;
  const ds::Config c = tiny(), lc = ds::llama2c_config(16, 32, 2, 2, 2, 40, 16, true);
  const ds::Weights w1 = ds::Weights::random(c, 1, 0.1f), w2 = ds::Weights::random(c, 2, 0.1f);
  const ds::Weights l1 = ds::Weights::random(lc, 1, 0.1f), l2 = ds::Weights::random(lc, 2, 0.1f);
  const std::string dir = tmp.path("folder"), ckpt = tmp.path("model.bin"), trace = tmp.path("t.json");
  ds::save_model_folder(dir, c, w1, chars_tokenizer(c.vocab_size));
  ds::save_llama2c(ckpt, lc, l1);
  ds::Trace t;
  t.model_name = "first";
  t.config = c;
  t.steps.emplace_back();
  t.steps.back().input = {1, 2};  // a trace has at least one step to replay
  t.save(trace);
  const auto folder_before = snapshot(dir);
  const std::string ckpt_before = read_file(ckpt), trace_before = read_file(trace);
  ds::Trace t2 = t;
  t2.model_name = std::string(200000, 'n');  // a trace longer than the stream's buffer
  for (int64_t at : {0, 8, 5000, 20000}) {
    SCOPED_TRACE(at);
    ds::fail_writes_after(at);
    EXPECT_NE(error_of([&] { ds::save_model_folder(dir, c, w2, chars_tokenizer(c.vocab_size)); }), "");
    ds::fail_writes_after(at);
    EXPECT_NE(error_of([&] { ds::save_llama2c(ckpt, lc, l2); }), "");
    ds::fail_writes_after(at);
    EXPECT_NE(error_of([&] { t2.save(trace); }), "");
    ds::clear_save_failures();
    EXPECT_EQ(snapshot(dir), folder_before);
    EXPECT_EQ(read_file(ckpt), ckpt_before);
    EXPECT_EQ(read_file(trace), trace_before);
    EXPECT_EQ(names(tmp.dir()), (std::vector<std::string>{"folder", "model.bin", "t.json"}));
  }
  // Uninterrupted, each is replaced by what loads back as the new weights.
  ds::save_model_folder(dir, c, w2, chars_tokenizer(c.vocab_size));
  ds::save_llama2c(ckpt, lc, l2);
  t2.save(trace);
  auto same = [](const ds::Weights& want, ds::Weights& got) {
    auto wt = const_cast<ds::Weights&>(want).tensors(), gt = got.tensors();
    ASSERT_EQ(gt.size(), wt.size());
    for (size_t i = 0; i < wt.size(); ++i) {
      const size_t n = size_t(wt[i].rows * wt[i].cols);
      EXPECT_TRUE(std::equal(wt[i].data, wt[i].data + n, gt[i].data)) << wt[i].name;
    }
  };
  auto from_folder = ds::load_model_folder(dir);
  auto from_ckpt = ds::load_llama2c(ckpt);
  same(w2, from_folder.w);
  same(l2, from_ckpt.w);
  EXPECT_EQ(ds::Trace::load(trace).model_name, t2.model_name);
  EXPECT_EQ(names(tmp.dir()), (std::vector<std::string>{"folder", "model.bin", "t.json"}));
}

// train --out DIR with a finished model in DIR: refused (saying so, suggesting --force)
// and the model untouched; --force trains and replaces it; a folder with only a
// checkpoint resumes as before.
TEST(AtomicSave, TrainRefusesAFinishedModelUnlessForced) {
  TempDir tmp;
  const std::string out = tmp.path("m");
  const std::string args = "train --task adder --steps 3 --threads 1 --seed 5 --out " + out;
  auto r = ds::test::run_cli(args);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto first = snapshot(out);
  std::ofstream(out + "/notes.txt") << "kept";
  r = ds::test::run_cli(args);
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "already holds a finished model") && contains(r.err, "--force")) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  auto now = snapshot(out);
  now.erase("notes.txt");
  EXPECT_EQ(now, first);
  r = ds::test::run_cli(args + " --steps 4 --force");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(read_file(fs::path(out) / "config.json"));
  EXPECT_EQ(j["training"]["steps"], 4);
  EXPECT_EQ(read_file(fs::path(out) / "notes.txt"), "kept");
  // The usage lists --force.
  r = ds::test::run_cli("train --help");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "--force")) << r.out;
}

// The file is handed to the system in 2 MB pieces at 2 MB offsets (so the page cache keeps
// it in 2 MB folios): writes of every size, straddling those boundaries, mixed with
// stream output, still give exactly the bytes written, in order.
TEST(AtomicSave, PiecesAcrossTwoMegabyteBoundariesKeepEveryByteInOrder) {
  TempDir tmp;
  const std::string path = tmp.path("pieces.bin");
  const size_t mb2 = size_t(2) << 20;
  const std::string big = random_bytes(3 * mb2 + 12345, 3);
  std::string want;
  ds::save_file(path, [&](ds::SaveFile& f) {
    size_t at = 0;
    auto put = [&](size_t n) {
      f.write(big.data() + at, n);
      want.append(big, at, n);
      at += n;
    };
    put(7);                       // a header's worth
    put(mb2 - 7);                 // ends on the first boundary
    put(2 * mb2);                 // two whole pieces straight through
    f.stream() << "text " << 42;  // stream output between writes
    want += "text 42";
    put(1);
    put(big.size() - at);  // the rest: a partial tail
  });
  EXPECT_EQ(ds::test::read_file(path), want);
  EXPECT_EQ(fs::file_size(path), want.size());
}
