#include "shell/options.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "engine_link/models.h"
#include "shell/app.h"

namespace dsgui {

namespace {

const char* kUsage = R"(decoderscope: watch a transformer decoder write text one token at a time.

usage: decoderscope [--model M] [--tokenizer F] [--precision f32|bf16|f16] [--products exact|fast] [--threads N]
                    [--prompt T | --source T] [--chat [--system T]] [--trace FILE.json]
                    [--steps N] [--view attention|heads|cross|residual|next|lens|branches|beams|block|kv|roles|attribution|compare|patching]
                    [--layer L] [--head H|mean] [--select POS] [--scores] [--mask-only] [--log]
                    [--colormap viridis|magma|greys] [--light] [--scale S]
                    [--temperature T] [--top-k K] [--top-p P] [--seed S] [--head-off [c]L:H ...]
                    [--repetition-penalty R] [--penalty-alpha A] [--preview-temperature T]
                    [--step-back K] [--fork-at STEP [--fork-seed S]] [--undo N] [--more-steps N] [--rank-heads R]
                    [--beam W] [--length-penalty A] [--cursor N] [--choose-branch N]
                    [--screenshot out.png] [--save-heatmap cells.png] [--save-trace out.dstrace]
                    [--stage ID] [--kv-pane cache|cost] [--no-kv-cache] [--bench] [--size WxH] [--presenter]
                    [--last-tokens N] [--zoom Z] [--soak N [--seed S]] [--sidecar] [--settings FILE]
                    [--compare-prompt T] [--compare-source T] [--compare-model M] [--compare-temperature T]
                    [--compare-seed S] [--compare-head-off "L:H ..."] [--compare-part next|attention|layers]

--model: a GGUF file (.gguf: llama, qwen2, qwen3, gemma3), a llama2.c .bin, a Hugging Face
  folder (Llama, Mistral, Qwen2, Qwen3, Gemma 3 with tokenizer.json; or GPT-2),
  builtin:NAME, random:decoder, random:long (1,024 positions), random:encdec or
  random:gpt2-small (default: builtin:stories, else builtin:dates, else the aidreams260K
  fixture, else random:decoder).
--precision: how the model's weights are kept in memory: f32 (float32, the default), bf16
  (bfloat16) or f16 (float16). 16-bit weights halve the memory each token reads; the
  arithmetic stays float32, at a small cost in accuracy. A GGUF file's quantized matrices
  (Q4_K, Q8_0, ...) stay as the file stores them; only its float32 matrices are narrowed.
--products: the products with a GGUF file's quantized matrices: fast (the default) rounds
  each product's input to 8 bits per block and multiplies integers, as llama.cpp does;
  exact multiplies float32 inputs with the decoded weights (a float32 engine on the
  file's decoded copy). With fast, a GGUF file's BF16 matrices take inputs rounded to
  bfloat16 where the processor has AVX-512 BF16, as llama.cpp does. The status line
  names the one in use for a quantized or BF16 model.
--threads: threads the engine computes a step with (default 1, which leaves the other
  cores to the window).
--prompt (decoder) or --prompt as the target prefix and --source (encoder-decoder).
--chat: start in chat mode (models whose tokenizer has a chat template): --prompt is the
  user's message, --system the system message; the template makes the prompt.
--trace: open a saved trace instead of a model (replay; nothing is recomputed).
--save-trace FILE: saves the trace once the steps are done (FILE.dstrace: the binary format; .json: JSON).
Scripted runs: --screenshot sets up, runs --steps steps (default 8), waits for the engine,
  renders a few frames, saves the window as PNG (and PNG.json with the heatmap cells'
  rectangles, for tests) and exits 0; --save-heatmap also saves the cells of the view's
  heatmap alone. --step-back K then scrubs back K steps and
  regenerates them with the engine (rewind + step) before the picture is taken.
  --head-off L:H (repeatable) re-runs the last step with those heads switched off
  (cL:H: a cross-attention head of an encoder-decoder model).
  --preview-temperature T sets the temperature slider to T after the steps: the Next token
  view then shows the last step reshaped by it, nothing drawn.
--repetition-penalty R: logits of tokens already in the text divided by R (R > 1: fewer
  repeats). --penalty-alpha A: contrastive search over the --top-k candidates.
  --fork-at STEP keeps the run as a branch, forks at STEP (1-based) with seed
  --fork-seed and generates again to --steps (for the Branches view). --undo N then presses
  Ctrl+Z N times (each what-if undone: its steps, settings and branches back); --more-steps N
  then takes N more steps. --rank-heads R: the All heads view switches each head off alone at
  the last step and ranks them (R > 0: then re-runs the step with the R-th ranked head off).
  --beam W and --length-penalty A: the Beam search view's width and length penalty; with
  --beam the search runs once the steps are done whatever the view, and its winner is kept
  as a branch. --cursor N then looks at step N (as Left would); --choose-branch N makes
  branch N live (Branches' button); --undo N without a what-if before presses Ctrl+Z N
  times at the very end.
--attribute-token T, --attribute-vs T2, --attribute-head L:H: the Attribution view splits the
  logit of T (a candidate of the step, as its text or #ID; default the drawn token), minus
  that of T2, and lists what head L:H (cL:H: cross-attention) writes.
--stage ID: the stage the Block view opens: input, ln1, attn.qkv, attn.scores, attn.mask,
  attn.softmax, attn.z, attn.out, add1, ln2, mlp.up, mlp.act, mlp.down, add2 (encoder-
  decoder: cross_attn.*, ln2, add2, then ln3, the FFN, add3), ln_final, logits or output;
  attn.qk_norm (Qwen3, Gemma 3) and post_attn, post_ffn (Gemma 3's norms after each
  sub-layer) where the model has them.
--kv-pane cache|cost: on a narrow window the KV cache view shows its keys and values or
  the cost of a step one at a time, under two tabs: the tab it opens on.
--no-kv-cache: generate without the KV cache: every step runs the whole sequence again (the
  same tokens, more work); the KV cache view plots the measured times of both.
--soak N: performs N random user actions (step, back, play, scrub, views, layer and head,
  fork, heads off, re-draw, sampler settings, prompts, save and reopen a trace, models,
  window size, theme and text size) with frames drawn between them, and exits 0, or 1 naming
  the action that failed (an error, an OpenGL error, an abort, a hang). --seed S seeds the
  choice of actions (and the sampler), so a run can be repeated. Prints the actions of each
  kind, the seconds and the peak memory every 1,000 actions and at the end.
--bench: runs 50 steps of a GPT-2-small-sized random model (or --model) while the window
  keeps drawing, and prints the longest frame time and the 99th percentile.
--size WxH: the window's size (default: 90% of the screen's work area).
--presenter: starts in presenter mode (F11): the view alone, full screen (a scripted run
  keeps --size). --last-tokens N: heatmaps show only the last N tokens, following generation.
  --zoom Z: heatmaps start zoomed in Z times (1: fit), showing the newest cells.
--compare-prompt T (and --compare-source, --compare-model, --compare-temperature, --compare-seed,
  --compare-head-off): the Compare view's B, run for as many steps as A once the steps are done
  (an empty prompt: A's); --compare-part picks the tab a narrow window shows.
--settings FILE: the settings file the window reads and updates (the File menu's recent
  models and traces); default $XDG_CONFIG_HOME/decoderscope/settings.json (else
  ~/.config/...), none in scripted runs. A damaged file is ignored with a notice.
--patch-clean T --patch-corrupt T --patch-answer A --patch-wrong W [--patch-site S]
  [--patch-layer L] [--patch-prefix T]: the Patching view's boxes (S: resid_pre, attn_out,
  mlp_out, head, head_pos, cross_attn_out, cross_head); a scripted run starts the experiment
  once the steps are done.
--sidecar: every picture F12 saves gets a PNG.json beside it, as a scripted run's has (for
  tests that drive the window with keys).
--lesson NAME|FILE [--lesson-step K] [--export DIR]: a guided tour (README, "Lessons"): the
  window opens on it (Page Down / Page Up go through its steps); with --screenshot F a
  scripted run takes step K's picture with its caption beside the view; --export DIR saves
  every step as DIR/NN.png (presenter mode, 1920x1080 unless --size) with the caption under
  the view. The other options win over
  the lesson's (--model FILE gives the steps that walk an open model one).
Keys: Right step, Left step back, Space play/pause (and stops Run to end), End run to the end,
  Ctrl +/- bigger/smaller, F11 presenter mode, F12 save the window as decoderscope-NNN.png
  (the next free number, in the folder of the last picture saved), F fit the heatmaps; on a
  heatmap the mouse wheel zooms and a drag pans.
)";

}  // namespace

[[noreturn]] void die(const std::string& msg) { throw OptionError(msg); }

bool scripted_command_line(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--screenshot" || a == "--save-heatmap" || a == "--bench" || a == "--soak") return true;
  }
  return false;
}

namespace {

long to_int(const std::string& s, const std::string& opt) {
  char* end = nullptr;
  long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end) die(opt + " expects an integer, got '" + s + "'");
  return v;
}

float to_float(const std::string& s, const std::string& opt) {
  char* end = nullptr;
  float v = std::strtof(s.c_str(), &end);
  if (s.empty() || *end || !std::isfinite(v)) die(opt + " expects a number, got '" + s + "'");
  return v;
}

bool is_sampler_option(const std::string& a) {
  for (const char* n : {"--temperature", "--top-k", "--top-p", "--seed", "--repetition-penalty", "--penalty-alpha",
                        "--preview-temperature"})
    if (a == n) return true;
  return false;
}

// The sampling options (--penalty-alpha turns contrastive search on); the preview's
// temperature is not a setting of the steps.
// The heatmaps' window: --last-tokens N, --zoom Z.
void map_option(Options& o, const std::string& a, const std::string& v) {
  if (a == "--zoom") {
    o.zoom = to_float(v, a);
    if (!(o.zoom >= 1.0f && o.zoom <= 64.0f)) die("--zoom must be between 1 (fit) and 64");
    return;
  }
  o.last_tokens = int(to_int(v, a));
  if (o.last_tokens < 0 || o.last_tokens > 100000) die("--last-tokens must be between 0 (all) and 100000");
}

void sampler_option(Options& o, const std::string& a, const std::string& v) {
  if (a == "--preview-temperature") {
    o.preview_temperature = to_float(v, a);
    return;
  }
  ds::SamplerConfig& s = o.sampler;
  if (a == "--temperature") s.temperature = to_float(v, a);
  if (a == "--top-k") s.top_k = int(to_int(v, a));
  if (a == "--top-p") s.top_p = to_float(v, a);
  if (a == "--seed") s.seed = uint64_t(to_int(v, a));
  if (a == "--repetition-penalty") s.repetition_penalty = to_float(v, a);
  if (a == "--penalty-alpha") s.penalty_alpha = to_float(v, a), s.contrastive = true;
  o.has_sampler = true;
}

// Defaults that depend on other options, and the ranges of the values given.
void check_options(Options& o) {
  if (view_index(o.view) < 0) die("unknown view '" + o.view + "': use " + view_id_list());
  if (o.bench && o.model.empty()) o.model = "random:gpt2-small";
  if (o.bench && !o.has_steps) o.steps = 50;
  if (o.steps < 0 || o.steps > 100000) die("--steps out of range");
  if (o.threads < 1 || o.threads > 256) die("--threads must be between 1 and 256");
  if (o.scale < 0.5f || o.scale > 4.0f) die("--scale must be between 0.5 and 4");
  if (o.width < 320 || o.height < 240) die("--size too small");
  if (o.width > kMaxWindowSide || o.height > kMaxWindowSide)
    die("--size " + std::to_string(o.width) + "x" + std::to_string(o.height) + " is too large (at most " +
        std::to_string(kMaxWindowSide) + " on each side)");
}

}  // namespace

// --head-off LAYER:HEAD (a self-attention head) or cLAYER:HEAD (a cross-attention head).
void head_off_option(Options& o, const std::string& a, std::string v) {
  const bool cross = !v.empty() && v[0] == 'c';
  if (cross) v.erase(0, 1);
  auto c = v.find(':');
  if (c == std::string::npos) die("--head-off expects LAYER:HEAD or cLAYER:HEAD, got '" + v + "'");
  (cross ? o.cross_heads_off : o.heads_off)
      .push_back({int(to_int(v.substr(0, c), a)), int(to_int(v.substr(c + 1), a))});
}

// --cursor N, --choose-branch N: a step or branch number, from 1.
void number_option(Options& o, const std::string& a, const std::string& v) {
  const long n = to_int(v, a);
  if (n < 1 || n > 100000) die(a + " expects a step or branch number from 1 to 100000");
  (a == "--cursor" ? o.cursor : o.choose_branch) = int(n);
}

// --size WIDTHxHEIGHT.
void size_option(Options& o, const std::string& a, const std::string& v) {
  auto x = v.find('x');
  if (x == std::string::npos) die("--size expects WIDTHxHEIGHT");
  o.width = int(to_int(v.substr(0, x), a));
  o.height = int(to_int(v.substr(x + 1), a));
  o.has_size = true;
}

// --kv-pane (the KV cache view's tab) and --attribute-token/-vs/-head (the Attribution view).
void pane_option(Options& o, const std::string& a, const std::string& v) {
  if (a == "--kv-pane") {
    if (v != "cache" && v != "cost") die("--kv-pane expects cache or cost");
    o.kv_pane = v;
  } else {
    (a == "--attribute-token" ? o.attribute_token : a == "--attribute-vs" ? o.attribute_vs : o.attribute_head) = v;
  }
}

// --compare-*: the Compare view's B (Options::has_compare).
void compare_option(Options& o, const std::string& a, const std::string& v) {
  o.has_compare = true;
  if (a == "--compare-prompt")
    o.compare_prompt = v;
  else if (a == "--compare-source")
    o.compare_source = v;
  else if (a == "--compare-model")
    o.compare_model = v;
  else if (a == "--compare-head-off")
    o.compare_heads_off = v;
  else if (a == "--compare-temperature")
    o.compare_temperature = to_float(v, a);
  else if (a == "--compare-seed")
    o.compare_seed = to_int(v, a);
  else if (a == "--compare-part") {
    const char* parts[] = {"next", "attention", "layers"};
    for (int i = 0; i < 3; ++i)
      if (v == parts[i]) o.compare_part = i;
    if (o.compare_part < 0) die("--compare-part expects next, attention or layers, got '" + v + "'");
  } else
    die("unknown option '" + a + "' (try --help)");
}

// An option without a value (a switch): sets it and returns true; false for any other.
bool switch_option(Options& o, const std::string& a) {
  static const std::pair<const char*, bool Options::*> kSwitches[] = {
      {"--chat", &Options::chat},       {"--no-kv-cache", &Options::no_kv_cache},
      {"--scores", &Options::scores},   {"--mask-only", &Options::mask_only},
      {"--log", &Options::log},         {"--light", &Options::light},
      {"--sidecar", &Options::sidecar}, {"--presenter", &Options::presenter},
      {"--bench", &Options::bench}};
  for (const auto& [name, member] : kSwitches)
    if (a == name) {
      o.*member = true;
      return true;
    }
  return false;
}

namespace {
// The Patching view's options (views.h, patching_script).
bool is_patch_option(const std::string& a) {
  for (const char* n : {"--patch-clean", "--patch-corrupt", "--patch-answer", "--patch-wrong", "--patch-prefix",
                        "--patch-site", "--patch-layer"})
    if (a == n) return true;
  return false;
}
}  // namespace

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (switch_option(o, a)) continue;
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (a == "--model")
      o.model = val();
    else if (a == "--tokenizer")
      o.tokenizer = val();
    else if (a == "--precision") {
      std::string v = val();
      if (!parse_precision(v, o.precision)) die("--precision expects f32, bf16 or f16, got '" + v + "'");
    } else if (a == "--products") {
      std::string v = val();
      if (!ds::parse_products(v, o.products)) die("--products expects exact or fast, got '" + v + "'");
    } else if (a == "--threads")
      o.threads = int(to_int(val(), a));
    else if (a == "--prompt")
      o.prompt = val(), o.has_prompt = true;
    else if (a == "--source")
      o.source = val(), o.has_source = true;
    else if (a == "--system")
      o.system = val(), o.has_system = true;
    else if (a == "--trace")
      o.trace = val();
    else if (a == "--settings")
      o.settings = val();
    else if (a == "--steps")
      o.steps = int(to_int(val(), a)), o.has_steps = true;
    else if (a == "--view")
      o.view = val();
    else if (a == "--layer")
      o.layer = int(to_int(val(), a));
    else if (a == "--head") {
      std::string v = val();
      o.head = v == "mean" ? -1 : int(to_int(v, a));
    } else if (a == "--select")
      o.select = int(to_int(val(), a));
    else if (a == "--step-back")
      o.step_back = int(to_int(val(), a));
    else if (a == "--fork-at")
      o.fork_at = int(to_int(val(), a));
    else if (a == "--fork-seed")
      o.fork_seed = to_int(val(), a);
    else if (a == "--more-steps" || a == "--rank-heads")
      (a == "--rank-heads" ? o.rank_heads : o.more_steps) = std::max(0, int(to_int(val(), a)));
    else if (a == "--undo") {
      o.undo = int(to_int(val(), a));
      if (o.undo < 0 || o.undo > 20) die("--undo must be between 0 and 20 (the what-ifs undo keeps)");
    } else if (a == "--cursor" || a == "--choose-branch")
      number_option(o, a, val());
    else if (a == "--beam") {
      o.beam_width = int(to_int(val(), a));
      if (o.beam_width < 1 || o.beam_width > 8) die("--beam must be between 1 and 8");
    } else if (a == "--length-penalty")
      o.length_penalty = to_float(val(), a);
    else if (a == "--screenshot")
      o.screenshot = val();
    else if (a == "--save-trace")
      o.save_trace = val();
    else if (a == "--save-heatmap")
      o.save_heatmap = val();
    else if (a == "--soak") {
      o.soak = int(to_int(val(), a));
      if (o.soak < 1 || o.soak > 10000000) die("--soak expects a number of actions from 1 to 10000000");
    } else if (a == "--stage")
      o.stage = val();
    else if (a == "--kv-pane" || a == "--attribute-token" || a == "--attribute-vs" || a == "--attribute-head")
      pane_option(o, a, val());
    else if (a == "--last-tokens" || a == "--zoom")
      map_option(o, a, val());
    else if (a == "--colormap")
      o.colormap = val();
    else if (a == "--scale")
      o.scale = to_float(val(), a);
    else if (is_sampler_option(a))
      sampler_option(o, a, val());
    else if (a == "--head-off")
      head_off_option(o, a, val());
    else if (a == "--size")
      size_option(o, a, val());
    else if (a.rfind("--compare-", 0) == 0)
      compare_option(o, a, val());
    else if (is_patch_option(a))
      o.patch[a.substr(8)] = val();
    else
      die("unknown option '" + a + "' (try --help)");
  }
  check_options(o);
  return o;
}

}  // namespace dsgui
