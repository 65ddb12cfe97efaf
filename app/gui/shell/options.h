#pragma once
// The window's command line (decoderscope --help).
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "perf/quant_fast.h"
#include "sample/sampler.h"
#include "util/precision.h"

namespace dsgui {

struct Options {
  std::string model, tokenizer, prompt, source, trace, view = "attention", screenshot, save_trace, save_heatmap;
  std::string colormap;
  bool has_prompt = false, has_source = false, has_steps = false;
  bool chat = false, has_system = false;  // --chat, --system TEXT
  std::string system;
  int steps = 8, layer = 0, head = 0, select = -1, step_back = 0, fork_at = 0, threads = 1;
  ds::Precision precision = ds::Precision::F32;
  ds::Products products = ds::Products::Fast;  // --products exact|fast
  long fork_seed = -1;
  bool scores = false, mask_only = false, log = false, light = false, bench = false;
  float scale = 1.0f;
  int width = 1280, height = 800;
  bool has_size = false;   // --size given (else an interactive window takes 90% of the screen)
  bool presenter = false;  // --presenter: start in presenter mode
  int last_tokens = 0;     // --last-tokens N: heatmaps show only the last N tokens (0: all)
  float zoom = 1;          // --zoom Z: heatmaps start zoomed in Z times, on the newest cells
  bool has_sampler = false;
  ds::SamplerConfig sampler{1.0f, 0, 0.9f, 0};
  float preview_temperature = -1;  // >= 0: the Next token view previews this temperature after the steps
  std::vector<std::pair<int, int>> heads_off;
  std::vector<std::pair<int, int>> cross_heads_off;  // --head-off cL:H
  int beam_width = 0;                                // --beam W (the Beam search view's width; 0: its default)
  float length_penalty = 1.0f;
  bool no_kv_cache = false;  // generate without the KV cache (the whole prefix again each step)
  bool sidecar = false;      // F12's pictures get the scripted run's PNG.json too (tests with keys)
  std::string kv_pane;       // the KV cache view's tab on a narrow window: cache or cost
  std::string stage;         // the Block view's stage opened (block_data.h ids: attn.scores, ln1, ...)
  int undo = 0;              // --undo N: Ctrl+Z N times after --head-off, --fork-at or --step-back
  int more_steps = 0;        // --more-steps N: N steps more after the undos
  int rank_heads =
      -1;        // --rank-heads [R]: All heads ranks every head at the last step (R > 0: then re-runs without the R-th)
  int soak = 0;  // --soak N: N random user actions (soak.h); --seed seeds their choice
  int cursor = 0;         // --cursor N: look at step N (1-based) once the steps are in, as Left would
  int choose_branch = 0;  // --choose-branch N: make branch N live at the end (Branches' button)
  std::string settings;   // --settings FILE: the recent models and traces (default: XDG's, none when scripted)
  // --attribute-token T, --attribute-vs T2, --attribute-head L:H: the Attribution view's
  // token (a candidate's text or #ID), the token subtracted, the head whose writes it lists.
  std::string attribute_token, attribute_vs, attribute_head;
  // --compare-prompt T, --compare-source T, --compare-model M, --compare-temperature T,
  // --compare-seed S, --compare-head-off "L:H ...", --compare-part next|attention|layers:
  // the Compare view's B, run once the steps are done.
  bool has_compare = false;
  std::string compare_prompt, compare_source, compare_model, compare_heads_off;
  float compare_temperature = -1;
  long compare_seed = -1;
  int compare_part = -1;
  std::map<std::string, std::string> patch;  // --patch-clean TEXT etc. (the Patching view; key without "--patch-")
};

// A bad command line; the message names the option.
struct OptionError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Parses the command line; prints the usage and exits 0 for --help, or throws
// OptionError with a message naming a bad option.
Options parse_options(int argc, char** argv);

// Throws OptionError(msg).
[[noreturn]] void die(const std::string& msg);

// Whether the command line asks for a scripted run (--screenshot, --save-heatmap,
// --bench), read without parsing the rest: a scripted run with a bad option exits.
bool scripted_command_line(int argc, char** argv);

// The largest window (either side) --size accepts.
inline constexpr int kMaxWindowSide = 8192;

}  // namespace dsgui
