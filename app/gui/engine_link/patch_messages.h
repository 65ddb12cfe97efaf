#pragma once
// The Patching view's request and answer (messages.h carries them between the window and
// the worker): activation patching (probe/patching.h) on texts the view's boxes hold.
#include <memory>
#include <string>
#include <vector>

#include "io/loader.h"
#include "probe/patching.h"

namespace dsgui {

// One grid of an experiment, with what its labels need.
struct PatchAnswer {
  std::string key;         // the request it answers
  bool cancelled = false;  // stopped by the user: nothing below
  ds::PatchGrid grid;
  std::vector<std::string> row_labels;      // the layers (head_pos: the heads), "0", "1", ...
  std::vector<std::string> col_labels;      // the positions' tokens, or "head 0", ...
  std::vector<bool> col_differs;            // positions where the two prompts differ
  std::vector<std::string> clean, corrupt;  // each prompt's (source's) tokens
  std::vector<int> clean_ids, corrupt_ids, prefix_ids;
  int answer = -1, wrong = -1;
  std::string answer_text, wrong_text;
  double seconds = 0;
};

namespace cmd {
// Patch each site of `site` alone from the clean run into the corrupted one. clean and
// corrupt: prompts (encoder-decoder models: sources; the decoder runs BOS + prefix);
// answer and wrong: one token each. layer: head_pos's layer.
struct Patch {
  std::string key, clean, corrupt, answer, wrong, prefix;
  ds::PatchSite site = ds::PatchSite::ResidPre;
  int layer = -1;
  int threads = 1;
};
}  // namespace cmd

namespace ev {
struct Patch {
  std::shared_ptr<const PatchAnswer> answer;
};
}  // namespace ev

// The worker's part (patch_job.cpp): the grid of c on model m, progress after each run
// (false: stop; the answer then says cancelled). Throws ds::Error on bad input.
std::shared_ptr<PatchAnswer> run_patch(const ds::LoadedModel& m, const cmd::Patch& c,
                                       const ds::AblationProgress& progress);

}  // namespace dsgui
