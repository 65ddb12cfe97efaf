#include "views/views.h"

#include <string>

namespace dsgui {

// The draw functions, one file each (views/NAME.cpp).
void panel_attention(App& app);
void panel_heads(App& app);
void panel_cross(App& app);
void panel_residual(App& app);
void panel_next(App& app);
void panel_lens(App& app);
void panel_branches(App& app);
void panel_beams(App& app);
void panel_block(App& app);
void panel_kv(App& app);
void panel_roles(App& app);
void panel_attribution(App& app);
void panel_compare(App& app);
void panel_patching(App& app);

// What the views that ask the worker offer the table (their files).
bool lens_waiting(App& app);
bool lens_answer(App& app, Event& e);
void lens_failed(App& app);
bool next_waiting(App& app);
bool next_shape_answer(App& app, Event& e);
void next_failed(App& app);
bool beams_waiting(App& app);
bool beams_answer(App& app, Event& e);
void beams_failed(App& app);
bool block_waiting(App& app);
bool block_answer(App& app, Event& e);
void block_failed(App& app);
bool kv_waiting(App& app);
bool kv_measure_answer(App& app, Event& e);
void kv_failed(App& app);
bool roles_waiting(App& app);
bool roles_answer(App& app, Event& e);
void roles_failed(App& app);
bool ablation_waiting(App& app);
bool ablation_answer(App& app, Event& e);
void ablation_failed(App& app);
bool attribution_waiting(App& app);
bool attribution_answer(App& app, Event& e);
void attribution_failed(App& app);
bool compare_waiting(App& app);
bool compare_answer(App& app, Event& e);
void compare_failed(App& app);
void compare_model_loaded(App& app);
bool patching_waiting(App& app);
bool patching_answer(App& app, Event& e);
void patching_failed(App& app);
// The table's other hooks (views/NAME.cpp).
void cross_model_loaded(App& app);
bool beams_step(App& app, int dir);
bool beams_playing(App& app, bool& playing);

namespace {

// The views in the order of their tabs: id (--view ID), title, one sentence of help
// (the tab's tooltip and the caption above the view), draw function, and the hooks of
// the views that have them (shell/view_table.h).
const ViewInfo kViews[] = {
    {"attention", "Attention",
     "Each row is a token reading earlier tokens: the brighter a cell, the more that token looks at the one in "
     "its column. Hatched cells are masked: a token may not look at tokens that come after it (nor, in a "
     "sliding-window layer, too far back).",
     panel_attention},
    {"heads", "All heads",
     "Every attention head of every layer at once, as small maps: click one to open it, right-click to switch it "
     "off and see how the next-token probabilities change.",
     panel_heads, ablation_waiting, ablation_answer, ablation_failed},
    {"cross", "Cross-attention",
     "In an encoder-decoder model each output token reads the source text through cross-attention: rows are output "
     "tokens, columns are source tokens, and the source below is tinted by how much the selected token reads it.",
     panel_cross, nullptr, nullptr, nullptr, cross_model_loaded},
    {"residual", "Residual stream",
     "The residual stream is the running sum each layer adds to: these are its lengths (norms) before attention, "
     "after attention (and after cross-attention, encoder-decoder) and after the feed-forward layer, per layer "
     "and position.",
     panel_residual},
    {"next", "Next token",
     "The model's probabilities for the next token, before and after temperature, top-k and top-p, and the random "
     "number that picked the token that came out.",
     panel_next, next_waiting, next_shape_answer, next_failed},
    {"lens", "Logit lens",
     "What the model would predict if it stopped after each layer: each layer's residual stream read through the "
     "final norm and the output head.",
     panel_lens, lens_waiting, lens_answer, lens_failed},
    {"branches", "Branches",
     "Fork the generation at a step and try other settings, another seed or a head switched off, then compare the "
     "two continuations side by side.",
     panel_branches},
    {"beams", "Beam search",
     "Beam search keeps the W most probable continuations at every step instead of one: each column is a step, "
     "each box a token with its log-probability; blue boxes were kept, grey ones pruned, green ones ended a "
     "hypothesis, and the gold path is the winner, kept as a branch beside the generation (Branches compares them). "
     "Click a box to keep that hypothesis as a branch too.",
     panel_beams, beams_waiting, beams_answer, beams_failed, nullptr, beams_step, beams_playing},
    {"block", "Block",
     "Inside one block, step by step, with the real numbers for the selected token: click a box to see its "
     "equation, its numbers and the lines of code that computed them.",
     panel_block, block_waiting, block_answer, block_failed},
    {"kv", "KV cache",
     "While generating, each token's keys and values are kept (the KV cache), so a step computes only the new "
     "token's row and reads the old ones back instead of recomputing the whole prefix.",
     panel_kv, kv_waiting, kv_measure_answer, kv_failed},
    {"roles", "Head roles",
     "Which heads look at the previous token, at earlier copies of the token, or at what followed an earlier copy "
     "(induction heads): each head's score on a probe of random tokens repeated twice. Click a head to see its "
     "attention on the probe.",
     panel_roles, roles_waiting, roles_answer, roles_failed},
    {"attribution", "Attribution",
     "Why this token? Its logit split into what each part wrote into the residual stream: the embedding, every "
     "head, every MLP and the biases, each read through the final norm (with this run's scale) and the token's "
     "row of the unembedding. Red parts push the token up, blue parts push it down; they add up to the logit.",
     panel_attribution, attribution_waiting, attribution_answer, attribution_failed},
    {"compare", "Compare",
     "Two runs side by side, token by token: A is the window's, B another prompt, another model with the same "
     "vocabulary, other settings or heads off. Orange marks where they differ.",
     panel_compare, compare_waiting, compare_answer, compare_failed, compare_model_loaded},
    {"patching", "Patching",
     "Activation patching: run a clean and a minimally changed (corrupted) prompt, then the corrupted one again with "
     "one site copied from the clean run; each cell shows how much of the clean answer that site brings back (0 = "
     "none, 1 = all).",
     panel_patching, patching_waiting, patching_answer, patching_failed},
};

}  // namespace

std::span<const ViewInfo> all_views() { return kViews; }

int view_index(std::string_view id) {
  for (size_t v = 0; v < std::size(kViews); ++v)
    if (id == kViews[v].id) return int(v);
  return -1;
}

bool views_waiting(App& app) {
  for (const ViewInfo& v : kViews)
    if (v.waiting && v.waiting(app)) return true;
  return false;
}

std::string views_waiting_list(App& app) {
  std::string s;
  for (const ViewInfo& v : kViews)
    if (v.waiting && v.waiting(app)) s += std::string(s.empty() ? "" : ", ") + v.title;
  return s;
}

std::string view_id_list() {
  std::string s;
  for (size_t v = 0; v < std::size(kViews); ++v)
    s += std::string(v == 0 ? "" : v + 1 == std::size(kViews) ? " or " : ", ") + kViews[v].id;
  return s;
}

}  // namespace dsgui
