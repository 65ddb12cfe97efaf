// The worker's part of the Patching view: texts to tokens, the experiment, the labels.
#include <chrono>

#include "engine_link/patch_messages.h"
#include "session/patch_text.h"

namespace dsgui {

std::shared_ptr<PatchAnswer> run_patch(const ds::LoadedModel& m, const cmd::Patch& c,
                                       const ds::AblationProgress& progress) {
  if (!m.model) throw ds::Error("activation patching needs a model loaded");
  const auto t0 = std::chrono::steady_clock::now();
  const ds::Config& cfg = m.model->cfg;
  const ds::Tokenizer* tok = m.tokenizer.get();
  auto a = std::make_shared<PatchAnswer>();
  a->key = c.key;
  const ds::PatchInput in = ds::patch_input(cfg, tok, m.bos_prompt, c.clean, c.corrupt, c.answer, c.wrong, c.prefix);
  a->clean_ids = in.clean, a->corrupt_ids = in.corrupt, a->prefix_ids = in.prefix;
  a->clean = ds::token_texts(tok, in.clean), a->corrupt = ds::token_texts(tok, in.corrupt);
  a->answer = in.answer, a->wrong = in.wrong;
  a->answer_text = ds::token_texts(tok, {in.answer})[0], a->wrong_text = ds::token_texts(tok, {in.wrong})[0];
  try {
    ds::Patcher p(m.model, in, c.threads);
    a->grid = ds::patch_grid(p, c.site, c.layer, progress);
  } catch (const ds::Cancelled&) {
    a->cancelled = true;
    return a;
  }
  const ds::PatchGrid& g = a->grid;
  const bool heads_cols = c.site == ds::PatchSite::Head || c.site == ds::PatchSite::CrossHead;
  for (int r = 0; r < g.rows; ++r) a->row_labels.push_back(std::to_string(r));
  if (heads_cols) {
    for (int h = 0; h < g.cols; ++h) a->col_labels.push_back("head " + std::to_string(h));
    a->col_differs.assign(size_t(g.cols), false);
  } else {
    a->col_labels = cfg.encoder_decoder ? ds::token_texts(tok, in.prefix) : a->clean;
    for (size_t i = 0; i < a->col_labels.size(); ++i)
      a->col_differs.push_back(!cfg.encoder_decoder && in.clean[i] != in.corrupt[i]);
  }
  a->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return a;
}

}  // namespace dsgui
