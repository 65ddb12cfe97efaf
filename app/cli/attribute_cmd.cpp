// decoderscope-cli attribute: direct logit attribution (core/probe/attribution.h) of one
// token's logit at one position, as a ranked table or JSON.
//
//   attribute --model M [--tokenizer F] [--precision P] (--prompt TEXT | --prompt-ids "...")
//             [--source TEXT | --source-ids "..."] [--token T] [--vs T2] [--pos P] [--top N]
//             [--json] [--threads N]
#include "attribute_cmd.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "io/loader.h"
#include "probe/attribution.h"
#include "util/error.h"

namespace {

using ds::Error;

struct Opts {
  std::map<std::string, std::string> kv;
  bool has(const std::string& k) const { return kv.count(k) != 0; }
  std::string str(const std::string& k) const { return has(k) ? kv.at(k) : ""; }
  long long integer(const std::string& k, long long def, long long lo, long long hi) const {
    if (!has(k)) return def;
    const std::string& s = kv.at(k);
    char* end = nullptr;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    if (s.empty() || *end || v < lo || v > hi)
      throw Error("--" + k + " must be an integer between " + std::to_string(lo) + " and " + std::to_string(hi) +
                  ", got '" + s + "'");
    return v;
  }
};

Opts parse_opts(int argc, char** argv) {
  static const char* known[] = {"model", "tokenizer", "precision", "prompt", "prompt-ids", "source", "source-ids",
                                "token", "vs",        "pos",       "top",    "json",       "threads"};
  Opts o;
  for (int i = 2; i < argc; ++i) {
    const std::string s = argv[i];
    if (s.rfind("--", 0) != 0 || s.size() <= 2) throw Error("attribute: unexpected argument '" + s + "'");
    std::string k = s.substr(2), v;
    const size_t eq = k.find('=');
    if (eq != std::string::npos) v = k.substr(eq + 1), k = k.substr(0, eq);
    if (std::none_of(std::begin(known), std::end(known), [&](const char* n) { return k == n; }))
      throw Error("unknown option --" + k + " for attribute");
    if (k != "json" && eq == std::string::npos) {
      if (i + 1 >= argc) throw Error("option --" + k + " needs a value");
      v = argv[++i];
    }
    o.kv[k] = v;
  }
  return o;
}

std::vector<int> ids_of(const std::string& s, const std::string& what) {
  std::vector<int> ids;
  std::istringstream in(s);
  for (std::string t; in >> t;) {
    char* end = nullptr;
    const long v = std::strtol(t.c_str(), &end, 10);
    if (*end || v < 0 || v > (1 << 30)) throw Error(what + ": '" + t + "' is not a token id");
    ids.push_back(int(v));
  }
  return ids;
}

ds::Precision precision_opt(const Opts& o) {
  const std::string v = o.str("precision");
  if (v.empty() || v == "f32" || v == "float32") return ds::Precision::F32;
  if (v == "bf16" || v == "bfloat16") return ds::Precision::BF16;
  if (v == "f16" || v == "float16") return ds::Precision::F16;
  throw Error("--precision must be f32, bf16 or f16, not '" + v + "'");
}

std::vector<int> prompt_ids(const Opts& o, const ds::LoadedModel& m) {
  if (o.has("prompt") && o.has("prompt-ids")) throw Error("give one of --prompt and --prompt-ids");
  std::vector<int> ids;
  if (o.has("prompt-ids")) {
    ids = ids_of(o.str("prompt-ids"), "--prompt-ids");
  } else if (o.has("prompt")) {
    if (!m.tokenizer) throw Error("--prompt needs a tokenizer: give --tokenizer FILE (or use --prompt-ids)");
    ids = ds::encode_prompt(m, o.str("prompt"));
  } else if (m.model->cfg.bos_id >= 0) {
    ids = {m.model->cfg.bos_id};
  }
  if (ids.empty()) throw Error("the prompt has no tokens: give --prompt TEXT or --prompt-ids \"...\"");
  return ids;
}

std::vector<int> source_ids(const Opts& o, const ds::LoadedModel& m) {
  if (o.has("source-ids")) return ids_of(o.str("source-ids"), "--source-ids");
  if (!o.has("source")) return {};
  if (!m.tokenizer) throw Error("--source needs a tokenizer");
  return m.tokenizer->encode(o.str("source"), false);
}

std::string piece(const ds::LoadedModel& m, int id) {
  if (!m.tokenizer) return "#" + std::to_string(id);
  try {
    return m.tokenizer->piece(id);
  } catch (const std::exception&) {
    return "#" + std::to_string(id);
  }
}

// A token named on the command line: "#ID", a piece of the vocabulary exactly, or text the
// tokenizer makes one token of.
int token_of(const ds::LoadedModel& m, const std::string& what, const std::string& t) {
  const int V = m.model->cfg.vocab_size;
  if (t.size() > 1 && t[0] == '#') {
    const std::vector<int> id = ids_of(t.substr(1), what);
    if (id.size() != 1 || id[0] >= V)
      throw Error(what + " '" + t + "' is not a token id of this model (0 .. " + std::to_string(V - 1) + ")");
    return id[0];
  }
  if (t.empty()) throw Error(what + " is empty");
  if (!m.tokenizer) throw Error(what + " needs a tokenizer to read '" + t + "': give the id as #ID");
  for (int id = 0; id < std::min(V, m.tokenizer->vocab_size()); ++id)
    if (piece(m, id) == t) return id;
  const std::vector<int> ids = m.tokenizer->encode(t, false);
  if (ids.size() == 1) return ids[0];
  std::string parts;
  for (int id : ids) parts += (parts.empty() ? "'" : ", '") + piece(m, id) + "'";
  throw Error(what + " '" + t + "' is not one token: the tokenizer makes " + std::to_string(ids.size()) + " of it (" +
              parts + "); give one of them, or an id as #ID");
}

// The parts in the order of the table: largest |contribution| first, forward order on ties.
std::vector<size_t> ranked(const ds::Attribution& a) {
  std::vector<size_t> order(a.parts.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t x, size_t y) { return std::fabs(a.parts[x].value) > std::fabs(a.parts[y].value); });
  return order;
}

double abs_sum(const ds::Attribution& a) {
  double s = 0;
  for (const auto& p : a.parts) s += std::fabs(p.value);
  return s;
}

const char* kind_name(ds::PartKind k) {
  switch (k) {
    case ds::PartKind::Embed:
      return "embed";
    case ds::PartKind::PosEmbed:
      return "pos_embed";
    case ds::PartKind::Head:
      return "head";
    case ds::PartKind::AttnBias:
      return "attn_bias";
    case ds::PartKind::CrossHead:
      return "cross_head";
    case ds::PartKind::CrossBias:
      return "cross_bias";
    case ds::PartKind::Mlp:
      return "mlp";
  }
  return "?";
}

nlohmann::json as_json(const ds::LoadedModel& m, const ds::Attribution& a, const std::vector<int>& tokens) {
  nlohmann::json parts = nlohmann::json::array();
  for (const auto& p : a.parts)
    parts.push_back({{"label", ds::part_label(p)},
                     {"kind", kind_name(p.kind)},
                     {"layer", p.layer},
                     {"head", p.head},
                     {"value", p.value}});
  nlohmann::json j{{"model", m.name},
                   {"tokens", tokens},
                   {"pos", a.pos},
                   {"token", a.token},
                   {"text", piece(m, a.token)},
                   {"greedy", a.greedy},
                   {"bias_term", a.bias_term},
                   {"sum", a.total() - a.bias_term},
                   {"total", a.total()},
                   {"logit", a.logit},
                   {"logit_min", a.logit_min},
                   {"logit_max", a.logit_max},
                   {"scale", a.scale},
                   {"centered", a.centered},
                   {"softcap", a.softcap},
                   {"parts", std::move(parts)}};
  if (a.vs >= 0) j["vs"] = a.vs, j["vs_text"] = piece(m, a.vs);
  return j;
}

void print_table(const ds::LoadedModel& m, const ds::Attribution& a, int top) {
  const std::string what = a.vs >= 0 ? "logit('" + piece(m, a.token) + "') - logit('" + piece(m, a.vs) + "')"
                                     : "the logit of '" + piece(m, a.token) + "' (id " + std::to_string(a.token) + ")";
  std::printf("%s at position %d on %s%s\n", what.c_str(), a.pos, m.name.c_str(),
              a.token == a.greedy && a.vs < 0 ? " (the most probable next token)" : "");
  std::printf("most probable next token: '%s' (id %d)\n", piece(m, a.greedy).c_str(), a.greedy);
  std::printf("final norm scale at this position: %.6g%s\n\n", a.scale,
              a.centered ? " (LayerNorm: each part's mean removed)" : "");
  std::printf("rank  component            contribution   share\n");
  const double sum_abs = abs_sum(a);
  const std::vector<size_t> order = ranked(a);
  for (size_t r = 0; r < order.size() && int(r) < top; ++r) {
    const auto& p = a.parts[order[r]];
    std::printf("%4zu  %-20s %+12.5f  %+6.1f%%\n", r + 1, ds::part_label(p).c_str(), p.value,
                sum_abs > 0 ? 100.0 * p.value / sum_abs : 0.0);
  }
  if (int(order.size()) > top) {
    double rest = 0;
    for (size_t r = size_t(top); r < order.size(); ++r) rest += a.parts[order[r]].value;
    std::printf("      (%zu more)            %+12.5f\n", order.size() - size_t(top), rest);
  }
  std::printf("\nsum of the %zu contributions     %+.6f\n", a.parts.size(), a.total() - a.bias_term);
  std::printf("final norm bias term            %+.6f\n", a.bias_term);
  std::printf("total                           %+.6f\n", a.total());
  std::printf("the model's logit%s  %+.6f\n", a.vs >= 0 ? " difference    " : "               ", a.logit);
  std::printf("(share: a contribution over the sum of their sizes; logits at this position range %.4g .. %.4g)\n",
              a.logit_min, a.logit_max);
  if (a.softcap) std::printf("(the model soft-caps its logits; these are before the cap)\n");
}

}  // namespace

int cmd_attribute(int argc, char** argv) {
  const Opts o = parse_opts(argc, argv);
  if (!o.has("model")) throw Error("--model PATH is required");
  const ds::LoadedModel m = ds::load_model(o.str("model"), o.str("tokenizer"), precision_opt(o));
  const ds::Config& c = m.model->cfg;
  if (const std::string why = ds::attribution_refusal(c); !why.empty()) throw Error(m.name + ": " + why);
  ds::AttributionRequest r;
  r.tokens = prompt_ids(o, m);
  r.source = source_ids(o, m);
  if (c.encoder_decoder && r.source.empty()) throw Error("an encoder-decoder model needs --source TEXT");
  r.pos = int(o.integer("pos", int(r.tokens.size()) - 1, 0, int(r.tokens.size()) - 1));
  if (o.has("token")) r.token = token_of(m, "--token", o.str("token"));
  if (o.has("vs")) {
    r.vs = token_of(m, "--vs", o.str("vs"));
    if (!o.has("token")) throw Error("--vs T2 goes with --token T: the difference logit(T) - logit(T2)");
  }
  r.threads = int(o.integer("threads", 1, 1, 256));
  const int top = int(o.integer("top", 20, 1, 1 << 20));
  const ds::Attribution a = ds::attribute(m.model, r);
  if (o.has("json")) {
    const auto j = as_json(m, a, std::vector<int>(r.tokens.begin(), r.tokens.begin() + a.pos + 1));
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    print_table(m, a, top);
  }
  return 0;
}
