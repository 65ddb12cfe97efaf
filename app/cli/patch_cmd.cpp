// decoderscope-cli patch: activation patching (probe/patching.h). A clean and a corrupted
// prompt of the same length, an answer and a wrong token; each site of one kind patched
// from the clean run into the corrupted one alone, and how much of
// logit(answer) - logit(wrong) it brings back (0 = corrupted, 1 = clean), as a grid.
#include "patch_cmd.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/loader.h"
#include "probe/patching.h"
#include "session/patch_text.h"
#include "util/error.h"

namespace {

using ds::Error;

std::map<std::string, std::string> parse_opts(int argc, char** argv) {
  const std::vector<std::string> known = {"model", "tokenizer", "clean",  "corrupt", "answer",
                                          "wrong", "site",      "prefix", "layer",   "threads"};
  std::map<std::string, std::string> o;
  for (int i = 2; i < argc; ++i) {
    std::string k = argv[i];
    if (k.rfind("--", 0) != 0) throw Error("patch: unexpected argument '" + k + "'");
    k = k.substr(2);
    std::string v;
    if (auto eq = k.find('='); eq != std::string::npos) {
      v = k.substr(eq + 1);
      k = k.substr(0, eq);
    } else if (k != "json") {
      if (i + 1 >= argc) throw Error("option --" + k + " needs a value");
      v = argv[++i];
    }
    if (k != "json" && std::find(known.begin(), known.end(), k) == known.end())
      throw Error("unknown option --" + k + " for patch");
    o[k] = v;
  }
  for (const char* need : {"model", "clean", "corrupt", "answer", "wrong"})
    if (!o.count(need)) throw Error(std::string("patch needs --") + need);
  return o;
}

int int_opt(const std::map<std::string, std::string>& o, const std::string& k, int def, int lo, int hi) {
  auto it = o.find(k);
  if (it == o.end()) return def;
  char* end = nullptr;
  const long v = std::strtol(it->second.c_str(), &end, 10);
  if (it->second.empty() || *end || v < lo || v > hi)
    throw Error("--" + k + " must be an integer from " + std::to_string(lo) + " to " + std::to_string(hi) + ", got '" +
                it->second + "'");
  return int(v);
}

// What the columns (or rows, head_pos) of a grid are called.
std::vector<std::string> column_labels(const ds::PatchGrid& g, const std::vector<std::string>& pos_text) {
  std::vector<std::string> v;
  if (g.site == ds::PatchSite::Head || g.site == ds::PatchSite::CrossHead) {
    for (int h = 0; h < g.cols; ++h) v.push_back("H" + std::to_string(h));
    return v;
  }
  return pos_text;
}

// A token's text for a terminal column: control characters shown, at most 7 characters.
std::string cell_text(const std::string& s) {
  std::string o;
  for (char ch : s) o += ch == '\n' ? std::string("\\n") : ch == '\t' ? std::string("\\t") : std::string(1, ch);
  size_t n = 0, cut = o.size();
  for (size_t i = 0; i < o.size(); ++i)
    if ((static_cast<unsigned char>(o[i]) & 0xC0) != 0x80 && ++n > 7) {
      cut = i;
      break;
    }
  return o.substr(0, cut);
}

void print_grid(const ds::PatchGrid& g, const std::vector<std::string>& cols, const std::vector<bool>& differs) {
  const bool by_pos = g.site != ds::PatchSite::Head && g.site != ds::PatchSite::CrossHead;
  std::printf("%-8s", g.site == ds::PatchSite::HeadPos ? "head" : "layer");
  for (int c = 0; c < g.cols; ++c) std::printf(" %7d", c);
  std::printf("\n%-8s", "");
  for (int c = 0; c < g.cols; ++c) {
    const std::string t = cell_text(cols[size_t(c)]);
    size_t width = 0;
    for (char ch : t) width += (static_cast<unsigned char>(ch) & 0xC0) != 0x80;
    std::printf(" %s%s", std::string(7 - std::min<size_t>(7, width), ' ').c_str(), t.c_str());
  }
  std::printf("\n");
  if (by_pos) {
    std::printf("%-8s", "");
    for (int c = 0; c < g.cols; ++c) std::printf(" %7s", c < int(differs.size()) && differs[size_t(c)] ? "^^^" : "");
    std::printf("\n");
  }
  for (int r = 0; r < g.rows; ++r) {
    std::printf("%-8s", ((g.site == ds::PatchSite::HeadPos ? "H" : "L") + std::to_string(r)).c_str());
    for (int c = 0; c < g.cols; ++c) std::printf(" %7.3f", g.at(r, c));
    std::printf("\n");
  }
}

}  // namespace

int cmd_patch(int argc, char** argv) {
  const auto o = parse_opts(argc, argv);
  ds::PatchSite site = ds::PatchSite::ResidPre;
  const std::string site_name = o.count("site") ? o.at("site") : "resid_pre";
  if (!ds::parse_patch_site(site_name, site))
    throw Error("--site must be resid_pre, attn_out, mlp_out, head, head_pos, cross_attn_out or cross_head, not '" +
                site_name + "'");
  const ds::LoadedModel m = ds::load_model(o.at("model"), o.count("tokenizer") ? o.at("tokenizer") : "");
  const ds::Config& c = m.model->cfg;
  if (site == ds::PatchSite::HeadPos && !o.count("layer")) throw Error("--site head_pos needs --layer L");
  const int layer = int_opt(o, "layer", -1, 0, c.n_layers - 1);
  const int threads = int_opt(o, "threads", 1, 1, 256);
  const ds::PatchInput in = ds::patch_input(c, m.tokenizer.get(), m.bos_prompt, o.at("clean"), o.at("corrupt"),
                                            o.at("answer"), o.at("wrong"), o.count("prefix") ? o.at("prefix") : "");
  ds::Patcher p(m.model, in, threads);
  const ds::PatchGrid g = ds::patch_grid(p, site, layer);
  const auto clean_t = ds::token_texts(m.tokenizer.get(), in.clean),
             corrupt_t = ds::token_texts(m.tokenizer.get(), in.corrupt);
  const auto pos_t = c.encoder_decoder ? ds::token_texts(m.tokenizer.get(), in.prefix) : clean_t;
  std::vector<bool> differs;
  for (size_t i = 0; i < in.clean.size(); ++i) differs.push_back(!c.encoder_decoder && in.clean[i] != in.corrupt[i]);
  const std::string ans = ds::token_texts(m.tokenizer.get(), {in.answer})[0],
                    wr = ds::token_texts(m.tokenizer.get(), {in.wrong})[0];
  const auto cols = column_labels(g, pos_t);
  if (o.count("json")) {
    nlohmann::json values = nlohmann::json::array(), metrics = nlohmann::json::array();
    for (int r = 0; r < g.rows; ++r) {
      nlohmann::json vr = nlohmann::json::array(), mr = nlohmann::json::array();
      for (int col = 0; col < g.cols; ++col) {
        vr.push_back(g.at(r, col));
        mr.push_back(g.metric[size_t(r * g.cols + col)]);
      }
      values.push_back(vr), metrics.push_back(mr);
    }
    nlohmann::json j{{"model", m.name},
                     {"site", ds::patch_site_name(site)},
                     {"layer", g.layer},
                     {"rows", g.rows},
                     {"cols", g.cols},
                     {"clean_ids", in.clean},
                     {"corrupt_ids", in.corrupt},
                     {"clean_tokens", clean_t},
                     {"corrupt_tokens", corrupt_t},
                     {"prefix_ids", in.prefix},
                     {"columns", cols},
                     {"answer", {{"id", in.answer}, {"text", ans}}},
                     {"wrong", {{"id", in.wrong}, {"text", wr}}},
                     {"clean_metric", g.clean},
                     {"corrupt_metric", g.corrupt},
                     {"value", values},
                     {"metric", metrics}};
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  std::printf("%s: logit('%s') - logit('%s') at the last position is %+.4f clean, %+.4f corrupted\n", m.name.c_str(),
              ans.c_str(), wr.c_str(), g.clean, g.corrupt);
  std::printf("%s patched alone from the clean run into the corrupted one: 0 = as corrupted, 1 = as clean\n",
              g.site == ds::PatchSite::HeadPos
                  ? ("layer " + std::to_string(g.layer) + "'s heads, each position,").c_str()
                  : ds::patch_site_name(site));
  if (c.encoder_decoder) std::printf("(clean and corrupted are the sources; columns are the decoder's tokens)\n");
  std::printf("\n");
  print_grid(g, cols, differs);
  return 0;
}
