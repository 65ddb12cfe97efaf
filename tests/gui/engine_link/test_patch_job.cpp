// The Patching view's request through the worker: the grid arrives with its labels, the
// first layer's residual stream restores exactly the changed token (1) and nothing
// elsewhere (0), a second request with the same texts gives the same numbers, and prompts
// of different lengths come back as an error event saying why.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "drain.h"
#include "engine_link/worker.h"

namespace {

namespace cmd = dsgui::cmd;
namespace ev = dsgui::ev;

using dsgui_test::drain;

std::shared_ptr<const dsgui::PatchAnswer> patch(dsgui::Worker& w, const cmd::Patch& c, std::string* error = nullptr) {
  w.post(c);
  std::shared_ptr<const dsgui::PatchAnswer> a;
  for (auto& e : drain(w)) {
    if (auto* p = std::get_if<ev::Patch>(&e)) a = p->answer;
    if (auto* err = std::get_if<ev::Error>(&e); err && error) *error = err->msg;
  }
  return a;
}

TEST(GuiPatch, TheWorkerAnswersWithTheGridAndItsLabels) {
  dsgui::Worker w;
  w.post(cmd::Load{"random:decoder", "", ds::Precision::F32});
  drain(w);
  cmd::Patch c;
  c.key = "k";
  c.clean = "abcdef", c.corrupt = "abxdef", c.answer = "a", c.wrong = "b";
  const auto a = patch(w, c);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->key, "k");
  EXPECT_FALSE(a->cancelled);
  ASSERT_EQ(a->clean_ids.size(), a->corrupt_ids.size());
  const ds::PatchGrid& g = a->grid;
  ASSERT_EQ(g.cols, int(a->clean_ids.size()));
  ASSERT_EQ(int(a->row_labels.size()), g.rows);
  ASSERT_EQ(int(a->col_labels.size()), g.cols);
  int changed = 0;
  for (int t = 0; t < g.cols; ++t) {
    const bool differs = a->clean_ids[size_t(t)] != a->corrupt_ids[size_t(t)];
    changed += differs;
    EXPECT_EQ(bool(a->col_differs[size_t(t)]), differs);
    EXPECT_EQ(g.at(0, t), differs ? 1.0 : 0.0) << "position " << t;
  }
  EXPECT_EQ(changed, 1);
  c.key = "again";
  const auto b = patch(w, c);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->grid.value, g.value);
  c.site = ds::PatchSite::Head;
  const auto h = patch(w, c);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->col_labels.front(), "head 0");
  c.corrupt = "abxdefg";
  std::string err;
  EXPECT_FALSE(patch(w, c, &err));
  EXPECT_NE(err.find("same length"), std::string::npos) << err;
}

}  // namespace
