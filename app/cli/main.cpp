// decoderscope-cli: the engine without a window, for scripts, tests and slides.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <sys/resource.h>

#include <nlohmann/json.hpp>

#include "attribute_cmd.h"
#include "bench/decode_bench.h"
#include "bench/load_split.h"
#include "io/gguf.h"
#include "io/llama2c.h"
#include "io/loader.h"
#include "io/model_folder.h"
#include "model/cost.h"
#include "patch_cmd.h"
#include "probe/ablation.h"
#include "probe/heads.h"
#include "probe/lens.h"
#include "session/beam.h"
#include "session/session.h"
#include "text/chat_template.h"
#include "text/gguf_tokenizer.h"
#include "text/gpt2_tokenizer.h"
#include "text/hf_tokenizer.h"
#include "train_cmds.h"
#include "util/error.h"

namespace {

using ds::Error;

const char* kUsage = R"(decoderscope-cli: run a transformer decoder one token at a time and record what it does.

usage:
  decoderscope-cli generate --model PATH [--tokenizer FILE] [--steps N]
                            [--prompt TEXT | --prompt-ids "1 2 3"] [--source TEXT | --source-ids "..."]
                            [--temperature T] [--top-k K] [--top-p P] [--seed S]
                            [--repetition-penalty R] [--penalty-alpha A --top-k K]
                            [--ids] [--trace FILE [--hooks PATTERNS | --window-recording]] [--threads N] [--precision P]
                            [--no-kv-cache] [--products exact|fast]
  decoderscope-cli generate --beam W [--length-penalty A] [--all-beams] (model, prompt, source, --steps,
                            --ids, --threads as above)
  decoderscope-cli generate --chat QUESTION [--system TEXT] (model and sampling options as above)
  decoderscope-cli chat     --model PATH|--tokenizer DIR|FILE.gguf --messages FILE.json [--render]
                            [--steps N] [--temperature T] [--top-k K] [--top-p P] [--seed S] [--ids]
                            [--threads N] [--precision P]
  decoderscope-cli hooks    --model PATH
  decoderscope-cli lens     --model PATH [--tokenizer FILE] [--prompt TEXT | --prompt-ids "..."]
                            [--source TEXT | --source-ids "..."] [--top-k K] [--position P] [--steps N]
                            [--temperature T] [--top-p P] [--seed S] [--json] [--threads N] [--precision P]
                            [--products exact|fast]
  decoderscope-cli heads    --model PATH [--tokenizer FILE] [--half N] [--seed S] [--exclude-bos]
                            [--exclude-current-token] [--json] [--threads N] [--precision P]
                            [--products exact|fast]
  decoderscope-cli heads    --ablation --model PATH [--prompt TEXT | --prompt-ids "..."]
                            [--source TEXT | --source-ids "..."] [--steps N] [--step K] [--head [c]L:H]
                            [--temperature T] [--top-p P] [--seed S] [--json] [--threads N]
  decoderscope-cli attribute --model PATH [--tokenizer FILE] [--prompt TEXT | --prompt-ids "..."]
                            [--source TEXT | --source-ids "..."] [--token T] [--vs T2] [--pos P] [--top N]
                            [--json] [--threads N] [--precision P]
  decoderscope-cli patch    --model PATH --clean TEXT --corrupt TEXT --answer TOKEN --wrong TOKEN
                            [--site resid_pre|attn_out|mlp_out|head|head_pos|cross_attn_out|cross_head]
                            [--layer L] [--prefix TEXT] [--json] [--threads N]
  decoderscope-cli bench    --model PATH [--steps N] [--threads N] [--reps R] [--precision P]
                            [--prefill N] [--trace-tokens N] [--copy] [--products exact|fast]
  decoderscope-cli inspect  --model PATH [--precision P]
  decoderscope-cli tokenize --model PATH [--tokenizer FILE] (TEXT | --jsonl)
  decoderscope-cli tokenize --tokenizer DIR|FILE.json|FILE.gguf (TEXT | --jsonl)
  decoderscope-cli random   --out FILE [--dim D] [--hidden H] [--layers L] [--heads N]
                            [--kv-heads K] [--vocab V] [--seq-len S] [--seed S]
  decoderscope-cli random   --arch gpt2 --out DIR [--dim D] [--layers L] [--heads N] [--vocab V]
                            [--seq-len S] [--seed S] [--dtype F32|BF16|F16]
  decoderscope-cli convert  --in TRACE --out TRACE

--model PATH: a GGUF file (llama, qwen2, qwen3 or gemma3 architecture: Llama 2 and 3.x,
  TinyLlama, SmolLM2, Mistral, Qwen2.5, Qwen3, Gemma 3; F32, F16, BF16, Q8_0, Q4_0, Q4_K,
  Q5_K, Q6_K, e.g. Q4_K_M files; quantized matrices stay quantized), a llama2.c .bin, a
  GPT-2 or decoderscope model folder, or builtin:NAME (models/NAME in the program's
  ../share/decoderscope, else the build tree's assets/, else $DECODERSCOPE_DATA).
--products exact|fast (generate, chat, lens, heads, bench): the products with a GGUF file's
  quantized matrices. fast (the default) rounds each product's input vector to 8 bits per
  block and multiplies integers, as llama.cpp does (its logits on the file itself);
  exact multiplies float32 inputs with the decoded weights (a float32 engine on the
  file's decoded copy). With fast, a GGUF file's BF16 matrices take inputs rounded to
  bfloat16 where the processor has AVX-512 BF16, also as llama.cpp does. Other weights
  always multiply float32 inputs.
generate: --steps counts positions in all, prompt included (llama2.c's -n; default and
  maximum: the model's context). Prints the text (or with --ids the generated ids).
  A llama2.c model with no prompt starts from BOS (id 1). Defaults: temperature 1,
  top-p 0.9, top-k off, seed 0; temperature 0 is greedy.
  --repetition-penalty R (default 1 = off): the logit of every token already in the sequence
  is divided by R when positive, multiplied by R when negative, before temperature.
  --penalty-alpha A --top-k K: contrastive search (Hugging Face's penalty_alpha): of the K
  most probable tokens, the one with the best (1-A)*p - A*(largest cosine similarity of its
  hidden state with those of the text so far); it ignores --temperature and --top-p.
  --no-kv-cache: every step recomputes all the positions so far instead of reading the
  earlier keys and values from the KV cache (the trace records the same rows either way);
  afterwards stderr shows the time of the forward passes and of the same tokens run again
  with the cache, e.g. no KV cache: 412.3 ms for 64 tokens; with the KV cache: 31.0 ms (13.3x).
  Runs that take under a second are repeated (up to 5 times) and the medians shown. A
  second line gives what core/model/cost.h counts for those steps: multiply-adds and bytes
  read each way (contrastive search's look-aheads not included). Not with --beam.
generate --beam W: beam search with W hypotheses, as Hugging Face's generate(num_beams=W,
  length_penalty=A, early_stopping=False) defines it (README); prints the best hypothesis;
  --all-beams prints the finished ones with their scores. --length-penalty defaults to 1.
--trace FILE.json records every hook point of the run; --hooks keeps only the points
  matching a comma-separated list of patterns ('*' one name segment, '**' anything), in
  decoderscope's or TransformerLens's spelling: "blocks.*.attn.pattern,logits" or
  "blocks.*.attn.hook_pattern,blocks.*.hook_resid_post".
  Without --hooks the trace also holds the logit lens of every position (top 10 tokens
  of each layer).
generate --chat QUESTION [--system TEXT]: asks an instruct model a question inside its chat
  template (as chat does with [{"role": "system", ...}, {"role": "user", ...}]) and prints
  the answer alone.
chat: --messages FILE.json holds a list of {"role": "system"|"user"|"assistant", "content":
  TEXT}. --render prints the prompt the tokenizer's chat template makes of them with the
  generation prompt added (exactly what the transformers library's apply_chat_template(...,
  add_generation_prompt=True, tokenize=False) gives: the template runs in decoderscope's
  Jinja interpreter); without --render the model generates the answer, which is printed
  (--ids: its ids). The template is tokenizer_config.json's chat_template (Hugging Face
  folders) or tokenizer.chat_template (GGUF files); special tokens the template writes, such
  as <|im_start|>, are read as those tokens.
hooks: lists every hook point of the model, with TransformerLens's name for it.
lens: the logit lens. Runs the prompt and prints, for each layer (the embedding, then the
  output of every layer), the --top-k tokens (default 10) that the final norm and the output
  head read from the residual stream at --position (default: the last position run), with
  their probabilities. --steps N first generates up to N positions (sampled as generate
  does). --json prints one JSON object instead.
heads: the head detector (TransformerLens's head_detector). Runs a probe of --half random tokens
  (default: min(50, half the context, the usable ids)) repeated twice, after BOS when the model
  has one, and prints for every decoder self-attention head (layer x head) three scores: the
  share of its attention on the previous token (previous), on earlier copies of the current
  token (duplicate), and on the token after an earlier copy (induction). The strongest head of
  each kind is marked *. --seed S (default 1) draws the tokens; --exclude-bos drops attention
  to position 0 and --exclude-current-token attention to the query's own position from the
  scores (both off by default, as in TransformerLens). With the defaults the induction score
  of a perfect induction head is about 0.5: the BOS and the first half have no earlier copy to
  look at. --json prints one JSON object instead.
heads --ablation: which heads matter for one step. Generates up to --steps N positions (as
  lens does: temperature 1, top-p 0.9, seed 0 unless given), then at step --step K (1 = the
  prompt's step; default the last) switches each head off alone (self-attention, and cross-
  attention on encoder-decoder models) as the window's "Re-run with heads off" does, and prints
  every head ranked by the change in the log-probability of the token step K chose (the model's,
  at temperature 1), with the probability with the head off and its change.
  --head L:H (cL:H: cross-attention) prints instead that head's change at every step, the steps
  where it matters most first. --json prints one JSON object with full precision.
attribute: direct logit attribution. Runs the prompt and splits the logit of --token T (default:
  the most probable next token) at --pos P (0-based, default the last position) into what each
  part wrote into the residual stream: the embedding (and position embedding), every head
  (Wo times its z), each attention output bias, every MLP (and cross-attention heads), each read
  through the final norm with its scale from the run. Prints them ranked with their share (a
  contribution over the sum of their sizes), the final norm's bias term, the total and the
  model's logit. --vs T2: the same for logit(T) - logit(T2). T is a piece of the vocabulary,
  text that is one token, or #ID. --top N rows (default 20); --json prints every part.
  Post-norm and sandwich-norm models are refused (it is defined for pre-norm models).
patch: activation patching. The clean and the corrupted prompt (encoder-decoder models: the
  two sources; the decoder runs BOS + --prefix in both) must be the same number of tokens;
  --answer and --wrong must be one token each (or #ID). Every site of --site (default
  resid_pre: layer x position; attn_out, mlp_out, cross_attn_out: layer x position; head,
  cross_head: layer x head, the head at every position; head_pos --layer L: that layer's
  heads x position) is copied alone from the clean run into the corrupted run, and the grid
  shows how much of logit(answer) - logit(wrong) at the last position comes back:
  (patched - corrupted) / (clean - corrupted), 0 = corrupted, 1 = clean. ^^^ marks the
  positions where the prompts differ. --json prints the grid with full precision.
--trace FILE.dstrace writes the compact binary format (README); FILE.json JSON, refused
  above 200 MB. --window-recording records what the window records instead: float16
  values, its hook points and the logit lens's top 5.
convert: reads a trace in either format and writes it in the format --out's name gives
  (.json: JSON, else binary); prints each file's size, the seconds taken and the peak memory.
--precision f32|bf16|f16: how the weight matrices are kept in memory (default f32);
  16-bit weights halve the bytes each token reads, the arithmetic stays float32. A GGUF
  file's matrices stay as the file stores them; bf16/f16 narrow only its float32 ones.
bench: the machine's read bandwidth, the floor it sets for one token (weight and KV-cache
  bytes over bandwidth), decode ms/token with no observer and with the window's default
  observers (median of --reps runs of --steps positions, default 64), their ratios,
  a --prefill token prompt (default 512; 0 skips) against as many single steps, and with
  --trace-tokens N the memory of the trace after generating N positions; decode back to
  back (runs with nothing between the tokens, as llama-bench's tg). --copy: float32
  weights are read into memory (in tiles), and a GGUF file read whole into memory,
  instead of used in place in the mapped file (as llama-bench's --load-mode none).
tokenize: prints the ids of TEXT on one line. --tokenizer alone: a Hugging Face folder
  with tokenizer.json (+ tokenizer_config.json) of the llama family (byte-level BPE as in
  Llama 3, Qwen2/3, SmolLM; SentencePiece-style BPE as in Llama 2, Mistral, TinyLlama;
  added tokens such as <|im_start|> in TEXT are taken as themselves), or that
  tokenizer.json file, a GPT-2 tokenizer folder (vocab.json + merges.txt, or GPT-2's
  tokenizer.json), or a GGUF file's tokenizer (its tokenizer.ggml.* keys); the ids of the
  text alone, no BOS. --jsonl: reads {"text": ...}
  lines on standard input and writes {"text": ..., "ids": [...]} lines: the text's ids alone
  for every kind of tokenizer (no BOS), as tokenizer test suites compare them.
random: writes a llama2.c checkpoint with random weights (for benchmarks); with --arch gpt2
  a model folder of GPT-2's architecture (GPT-2 small by default), stored as --dtype.

  decoderscope-cli train --task dates|adder|stories --out DIR [--seed S] [--steps N] [--threads N]
                         [--norm pre|post] [--pos learned|sinusoidal] [--ffn gelu|relu]
                         [--scale-embed] [--lr X] [--warmup N] [--force]
  decoderscope-cli eval  --model DIR --task dates|adder|stories [--samples N] [--seed S] [--attention]
                         [--show-wrong]
  decoderscope-cli batch --model DIR    (one input per line on stdin, the greedy output per line)
train: trains a built-in model from scratch, or resumes from DIR/checkpoint.bin (saved every
  100 steps and on Ctrl-C), and writes DIR/config.json + model.safetensors. The adder writes
  the sum reversed, least-significant digit first: 123+45= gives 861. The model's
  architecture is the task's (dates: pre-norm, learned positions, GELU) unless changed:
  --norm post puts a LayerNorm after each sub-layer's residual add ("Add & Norm") and no
  final norm, and warms the rate up over 10% of the task's steps; --pos sinusoidal, --ffn
  relu and --scale-embed (embeddings times sqrt(d_model)) complete the original
  Transformer's: --task dates --norm post --pos sinusoidal --ffn relu --scale-embed is
  how builtin:dates-postnorm was trained. --lr and --warmup override the peak rate and
  the warm-up steps. The command that reproduces a run is saved in DIR/config.json.
  A DIR that already holds a finished model (config.json + model.safetensors) is refused
  unless --force is given; the folder is replaced only once the new model is written
  (its other files are kept).
  --task stories trains builtin:stories, a word-level GPT on the story grammar; its
  figures (perplexity against a Kneser-Ney trigram, the grammar of sampled stories,
  copying names, induction heads) are printed, saved in config.json, and printed again
  by eval --task stories.
)";

// The part of kUsage about one command: its usage lines ("  decoderscope-cli CMD ..."
// and their continuations), the paragraphs that begin with CMD at the left margin, and
// those about an option ("--X ...") that its usage lines list. Empty for an unknown
// command.
std::string command_usage(const std::string& cmd) {
  std::vector<std::string> lines;
  std::istringstream in(kUsage);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  const std::string head = "  decoderscope-cli ";
  std::string usage, text;
  std::vector<std::string> options;
  bool in_usage = false;
  for (const std::string& l : lines) {
    if (l.rfind(head, 0) == 0)
      in_usage = l.compare(head.size(), cmd.size() + 1, cmd + " ") == 0;
    else if (l.rfind("    ", 0) != 0)
      in_usage = false;
    if (!in_usage) continue;
    usage += l + "\n";
    for (size_t p = l.find("--"); p != std::string::npos; p = l.find("--", p + 2)) {
      size_t e = p + 2;
      while (e < l.size() && (std::isalnum(static_cast<unsigned char>(l[e])) || l[e] == '-')) ++e;
      options.push_back(l.substr(p, e - p));
    }
  }
  if (usage.empty()) return "";
  bool keep = false;
  for (const std::string& l : lines) {
    if (!l.empty() && l[0] != ' ') {
      const std::string word = l.substr(0, l.find_first_of(" :"));
      keep = word == cmd || (word.rfind("--", 0) == 0 && std::count(options.begin(), options.end(), word));
    } else if (l.empty() || l.rfind(head, 0) == 0) {
      keep = false;
    }
    if (keep) text += l + "\n";
  }
  return "usage:\n" + usage + (text.empty() ? "" : "\n" + text);
}

// Whether a command's arguments ask for its usage (--help or -h anywhere after it).
bool wants_help(int argc, char** argv) {
  for (int i = 2; i < argc; ++i)
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) return true;
  return false;
}

struct Args {
  std::string cmd;
  std::map<std::string, std::string> opt;
  std::vector<std::string> pos;
  bool has(const std::string& k) const { return opt.count(k) != 0; }
  std::string str(const std::string& k, const std::string& def = "") const {
    auto it = opt.find(k);
    return it == opt.end() ? def : it->second;
  }
  long long integer(const std::string& k, long long def, long long lo, long long hi) const {
    if (!has(k)) return def;
    const std::string& s = opt.at(k);
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(s.c_str(), &end, 10);
    if (s.empty() || *end || errno) throw Error("--" + k + " expects an integer, got '" + s + "'");
    if (v < lo || v > hi)
      throw Error("--" + k + " must be between " + std::to_string(lo) + " and " + std::to_string(hi) + ", got " + s);
    return v;
  }
  double number(const std::string& k, double def) const {
    if (!has(k)) return def;
    const std::string& s = opt.at(k);
    char* end = nullptr;
    double v = std::strtod(s.c_str(), &end);
    if (s.empty() || *end || !std::isfinite(v)) throw Error("--" + k + " expects a number, got '" + s + "'");
    return v;
  }
};

const char* kFlags[] = {"ids",
                        "render",
                        "help",
                        "jsonl",
                        "json",
                        "all-beams",
                        "no-kv-cache",
                        "exclude-bos",
                        "exclude-current-token",
                        "window-recording",
                        "copy",
                        "ablation"};

Args parse(int argc, char** argv) {
  Args a;
  if (argc < 2) throw Error("no command given; try decoderscope-cli --help");
  a.cmd = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string s = argv[i];
    if (s.rfind("--", 0) == 0 && s.size() > 2) {
      std::string k = s.substr(2);
      std::string v;
      if (auto eq = k.find('='); eq != std::string::npos) {
        v = k.substr(eq + 1);
        k = k.substr(0, eq);
      } else if (std::find(std::begin(kFlags), std::end(kFlags), k) == std::end(kFlags)) {
        if (i + 1 >= argc) throw Error("option --" + k + " needs a value");
        v = argv[++i];
      }
      a.opt[k] = v;
    } else {
      a.pos.push_back(s);
    }
  }
  return a;
}

void only(const Args& a, std::initializer_list<const char*> known) {
  for (auto& [k, v] : a.opt) {
    bool ok = false;
    for (auto* n : known) ok |= k == n;
    if (!ok) throw Error("unknown option --" + k + " for " + a.cmd);
  }
}

std::vector<int> parse_ids(const std::string& s, const std::string& what) {
  std::vector<int> ids;
  std::istringstream in(s);
  std::string tok;
  while (in >> tok) {
    char* end = nullptr;
    long v = std::strtol(tok.c_str(), &end, 10);
    if (*end || v < 0 || v > (1 << 30)) throw Error(what + ": '" + tok + "' is not a token id");
    ids.push_back(int(v));
  }
  return ids;
}

// --products exact|fast: the products with a GGUF file's quantized (and BF16) weights.
// fast (the default) rounds the activations to 8 bits per block (to bfloat16) as
// llama.cpp does and runs at the speed of the file's bytes; exact multiplies float32
// activations with the decoded weights (the reference a float32 engine on the decoded
// copy gives).
ds::Products products_of(const Args& a) {
  ds::Products p = ds::Products::Fast;
  if (a.has("products") && !ds::parse_products(a.str("products"), p))
    throw Error("--products expects exact or fast, got '" + a.str("products") + "'");
  return p;
}

ds::Precision precision_of(const Args& a) {
  ds::Precision p = ds::Precision::F32;
  if (a.has("precision")) {
    const std::string v = a.str("precision");
    if (v == "f32" || v == "float32")
      p = ds::Precision::F32;
    else if (v == "bf16" || v == "bfloat16")
      p = ds::Precision::BF16;
    else if (v == "f16" || v == "float16")
      p = ds::Precision::F16;
    else
      throw Error("--precision must be f32, bf16 or f16, not '" + v + "'");
  }
  return p;
}

ds::LoadedModel open_model(const Args& a) {
  if (!a.has("model")) throw Error("--model PATH is required");
  const ds::Precision p = precision_of(a);
  return ds::load_model(a.str("model"), a.str("tokenizer"), p);
}

// The ids of messages inside the model's chat template.
std::vector<int> chat_ids(const ds::LoadedModel& m, const nlohmann::ordered_json& messages) {
  if (!m.tokenizer) throw Error(m.name + ": a chat needs the model's tokenizer (tokenizer.json beside it)");
  const std::string text = ds::render_chat(m.chat, messages, m.name);
  std::vector<int> ids = ds::encode_chat(*m.tokenizer, m.chat, m.special_ids, text);
  if (ids.empty()) throw Error("the chat template made an empty prompt");
  return ids;
}

std::vector<int> prompt_of(const Args& a, const ds::LoadedModel& m) {
  const ds::Config& c = m.model->cfg;
  if (int(a.has("prompt")) + int(a.has("prompt-ids")) + int(a.has("chat")) > 1)
    throw Error("give one of --prompt, --prompt-ids and --chat");
  if (a.has("system") && !a.has("chat")) throw Error("--system goes with --chat QUESTION");
  if (a.has("chat")) {
    nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
    if (a.has("system")) msgs.push_back({{"role", "system"}, {"content", a.str("system")}});
    msgs.push_back({{"role", "user"}, {"content", a.str("chat")}});
    return chat_ids(m, msgs);
  }
  if (a.has("prompt-ids")) {
    auto ids = parse_ids(a.str("prompt-ids"), "--prompt-ids");
    if (ids.empty()) throw Error("--prompt-ids is empty");
    return ids;
  }
  if (a.has("prompt")) {
    if (!m.tokenizer) throw Error("--prompt needs a tokenizer: give --tokenizer FILE (or use --prompt-ids)");
    auto ids = ds::encode_prompt(m, a.str("prompt"));
    if (ids.empty()) throw Error("the prompt encodes to no tokens");
    return ids;
  }
  if (c.bos_id >= 0) return {c.bos_id};
  throw Error("this model has no begin-of-sequence token: give --prompt or --prompt-ids");
}

std::vector<int> source_of(const Args& a, const ds::LoadedModel& m) {
  if (a.has("source-ids")) return parse_ids(a.str("source-ids"), "--source-ids");
  if (a.has("source")) {
    if (!m.tokenizer) throw Error("--source needs a tokenizer");
    return m.tokenizer->encode(a.str("source"), false);
  }
  return {};
}

ds::SamplerConfig sampler_of(const Args& a) {
  ds::SamplerConfig s;
  s.temperature = float(a.number("temperature", 1.0));
  s.top_k = int(a.integer("top-k", 0, 0, 1 << 30));
  s.top_p = float(a.number("top-p", 0.9));
  s.seed = uint64_t(a.integer("seed", 0, 0, (1LL << 62)));
  s.repetition_penalty = float(a.number("repetition-penalty", 1.0));
  if (a.has("penalty-alpha")) {
    if (!a.has("top-k"))
      throw Error("--penalty-alpha (contrastive search) needs --top-k K, the number of candidates it compares");
    s.contrastive = true;
    s.penalty_alpha = float(a.number("penalty-alpha", 0.0));
  }
  ds::validate(s);
  return s;
}

// "blocks.*.attn.pattern, logits" -> {"blocks.*.attn.pattern", "logits"}.
std::vector<std::string> hook_patterns(const std::string& list) {
  std::vector<std::string> out;
  std::istringstream in(list);
  std::string p;
  while (std::getline(in, p, ',')) {
    p.erase(0, p.find_first_not_of(" \t"));
    p.erase(p.find_last_not_of(" \t") + 1);
    if (!p.empty()) out.push_back(p);
  }
  if (out.empty()) throw Error("--hooks expects hook names or patterns, e.g. \"blocks.*.attn.pattern\"");
  return out;
}

// Every hook point of the model: decoderscope's name, TransformerLens's, the shape.
int cmd_hooks(const Args& a) {
  only(a, {"model", "tokenizer", "precision"});
  auto m = open_model(a);
  std::printf("%-34s %-40s\n", "hook point", "TransformerLens name");
  for (const std::string& n : ds::Hooks::names(m.model->cfg)) {
    const std::string tl = ds::Hooks::transformerlens_name(n);
    std::printf("%-34s %-40s\n", n.c_str(), tl.empty() ? "-" : tl.c_str());
  }
  return 0;
}

// The text of generated ids (after the prompt's last token), as generate prints it.
std::string text_after(const ds::LoadedModel& m, int prev, const std::vector<int>& ids) {
  return ds::decode_text(*m.tokenizer, prev, ids);
}

// generate --beam W: beam search (session/beam.h). Prints the best hypothesis as
// generate prints a sampled one (the end-of-sequence token itself is not printed);
// --all-beams: every finished hypothesis, best first, with its score, sum of
// log-probabilities and length.
int generate_beam(const Args& a) {
  if (a.has("no-kv-cache"))
    throw Error("--no-kv-cache is not available with --beam: beam search keeps and forks a KV cache per hypothesis");
  only(a, {"model", "tokenizer", "steps", "prompt", "prompt-ids", "source", "source-ids", "ids", "threads", "precision",
           "beam", "length-penalty", "all-beams", "products"});
  auto m = open_model(a);
  ds::BeamOptions o;
  o.width = int(a.integer("beam", 1, 1, 1 << 16));
  o.length_penalty = float(a.number("length-penalty", 1.0));
  o.steps = int(a.integer("steps", 0, 0, 1 << 24));
  o.eos_ids = m.stop_ids;
  o.threads = int(a.integer("threads", 1, 1, 256));
  o.products = products_of(a);
  const std::vector<int> prompt = prompt_of(a, m);
  const ds::BeamResult r = ds::beam_search(m.model, prompt, source_of(a, m), o);
  const bool print_ids = a.has("ids") || !m.tokenizer;
  if (!a.has("ids") && !m.tokenizer)
    std::fprintf(stderr, "note: no tokenizer found (--tokenizer FILE); printing token ids\n");
  auto body = [&](const ds::BeamFinished& f) {
    std::vector<int> ids = f.tokens;
    if (f.eos && !ids.empty()) ids.pop_back();  // as generate: the stop token is not printed
    std::string s;
    if (print_ids) {
      for (size_t i = 0; i < ids.size(); ++i) s += (i ? " " : "") + std::to_string(ids[i]);
      return s;
    }
    for (size_t i = 1; i < prompt.size(); ++i) s += m.tokenizer->decode(prompt[i - 1], prompt[i]);
    return s + text_after(m, prompt.back(), ids);
  };
  if (!a.has("all-beams")) {
    std::printf("%s\n", body(r.finished.at(0)).c_str());
    return 0;
  }
  for (size_t i = 0; i < r.finished.size(); ++i) {
    const ds::BeamFinished& f = r.finished[i];
    std::printf("beam %zu: score %.6f, sum of log-probabilities %.6f, %zu tokens%s: %s\n", i, f.score, f.sum,
                f.tokens.size(), f.eos ? " (ended)" : "", body(f).c_str());
  }
  return 0;
}

// Sum of the steps' measured forward times, in milliseconds.
double forward_ms(const ds::Trace& t) {
  double ms = 0;
  for (const ds::TraceStep& st : t.steps) ms += std::max(0.0, st.forward_ms);
  return ms;
}

// The forward time of the run's tokens again, each step forced to the token the run
// drew, with the run's options and the KV cache on or off.
double rerun_ms(const ds::LoadedModel& m, ds::SessionOptions o, const ds::Session& run, const std::vector<int>& source,
                bool kv_cache) {
  o.kv_cache = kv_cache;
  ds::Session s(m.model, m.tokenizer, o);
  s.start(run.prompt(), source);
  for (int t : run.generated())
    if (s.step(t) < 0) break;
  return forward_ms(s.trace());
}

// generate --no-kv-cache: the time of the run's forward passes and of the same tokens
// with the KV cache, on stderr. A small model's steps take microseconds and one
// preempted step would decide, so while the passes take under a second in all they
// are repeated (the run itself counts as the first pass without the cache), up to 5
// of each, and the medians are reported.
void compare_with_cache(const ds::LoadedModel& m, const ds::SessionOptions& o, const ds::Session& run,
                        const std::vector<int>& source) {
  std::vector<double> without{forward_ms(run.trace())}, with{rerun_ms(m, o, run, source, true)};
  double spent = without[0] + with[0];
  while (without.size() < 5 && spent < 1000.0) {
    without.push_back(rerun_ms(m, o, run, source, false));
    with.push_back(rerun_ms(m, o, run, source, true));
    spent += without.back() + with.back();
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double a = median(without), b = median(with);
  std::fprintf(stderr, "no KV cache: %.1f ms for %zu tokens; with the KV cache: %.1f ms (%.1fx)", a,
               run.generated().size(), b, b > 0 ? a / b : 0.0);
  if (without.size() > 1) std::fprintf(stderr, "; medians of %zu runs", without.size());
  std::fprintf(stderr, "\n");
  // What core/model/cost.h counts for the same steps.
  const ds::Trace& t = run.trace();
  if (t.steps.empty()) return;
  ds::CostOptions co;
  co.bytes_per_weight = m.precision == ds::Precision::F32 ? 4 : 2;
  co.src_len = int(source.size());
  const int prompt = int(run.prompt().size()), positions = t.positions(int(t.steps.size()) - 1);
  const ds::StepCost x = ds::generation_cost(m.model->cfg, prompt, positions, false, co),
                     y = ds::generation_cost(m.model->cfg, prompt, positions, true, co);
  std::fprintf(stderr,
               "counted: %.3g multiply-adds and %.3g MB read without the KV cache, %.3g and %.3g MB with it "
               "(%.1fx the arithmetic)\n",
               x.macs(), x.bytes() / 1e6, y.macs(), y.bytes() / 1e6, y.macs() > 0 ? x.macs() / y.macs() : 0.0);
}

int cmd_generate(const Args& a) {
  if (a.has("beam")) return generate_beam(a);
  if (a.has("length-penalty") || a.has("all-beams"))
    throw Error("--length-penalty and --all-beams are options of beam search: give --beam W");
  only(a, {"model",         "tokenizer",   "steps",      "prompt",
           "prompt-ids",    "source",      "source-ids", "temperature",
           "top-k",         "top-p",       "seed",       "ids",
           "trace",         "hooks",       "threads",    "repetition-penalty",
           "penalty-alpha", "no-kv-cache", "precision",  "window-recording",
           "chat",          "system",      "products"});
  auto m = open_model(a);
  ds::SessionOptions o;
  o.kv_cache = !a.has("no-kv-cache");
  o.sampler = sampler_of(a);
  o.steps = int(a.integer("steps", 0, 0, 1 << 24));
  o.stop_ids = m.stop_ids;
  o.threads = int(a.integer("threads", 1, 1, 256));
  o.products = products_of(a);
  if (a.has("hooks") && !a.has("trace")) throw Error("--hooks chooses what --trace records; give --trace FILE.json");
  if (a.has("window-recording") && (a.has("hooks") || !a.has("trace")))
    throw Error("--window-recording chooses what --trace records: give --trace FILE and no --hooks");
  if (a.has("window-recording")) {
    o.record = ds::default_record_patterns(m.model->cfg);
    o.trace_options.compact = true;
    o.trace_options.lens_top_k = ds::kWindowLensTopK;
  } else if (a.has("trace")) {
    o.record = a.has("hooks") ? hook_patterns(a.str("hooks")) : std::vector<std::string>{"**"};
    if (!a.has("hooks")) o.trace_options.lens_top_k = 10;
  }
  const bool print_ids = a.has("ids") || !m.tokenizer;
  ds::Session s(m.model, m.tokenizer, o);
  const std::vector<int> source = source_of(a, m);
  s.start(prompt_of(a, m), source);
  if (!a.has("ids") && !m.tokenizer)
    std::fprintf(stderr, "note: no tokenizer found (--tokenizer FILE); printing token ids\n");
  std::vector<int> seq = s.prompt();
  if (!print_ids && !a.has("chat"))  // a chat prints the answer alone
    for (size_t i = 1; i < seq.size(); ++i) std::fputs(m.tokenizer->decode(seq[i - 1], seq[i]).c_str(), stdout);
  bool first = true;
  while (!s.done()) {
    int t = s.step();
    if (t < 0) break;
    if (s.stopped_on_token()) break;  // the stop token itself is not printed (run.c)
    if (print_ids) {
      std::printf(first ? "%d" : " %d", t);
    } else {
      std::fputs(m.tokenizer->decode(seq.back(), t).c_str(), stdout);
    }
    std::fflush(stdout);
    seq.push_back(t);
    first = false;
  }
  std::printf("\n");
  std::fflush(stdout);
  if (a.has("trace")) {
    ds::Trace t = s.trace();
    t.model_name = m.name;
    t.save(a.str("trace"));
  }
  if (!o.kv_cache) compare_with_cache(m, o, s, source);
  return 0;
}

nlohmann::ordered_json read_messages(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("--messages " + path + ": cannot open");
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(text.str());
  } catch (const nlohmann::json::exception&) {
    throw Error("--messages " + path + ": not valid JSON");
  }
  if (j.is_object() && j.contains("messages")) j = nlohmann::ordered_json(j["messages"]);
  try {
    return ds::chat_messages(j);
  } catch (const Error& e) {
    throw Error("--messages " + path + ": " + e.what());
  }
}

// chat --messages FILE.json [--render]: the template's prompt, or the model's answer.
int cmd_chat(const Args& a) {
  only(a, {"model", "tokenizer", "messages", "render", "steps", "temperature", "top-k", "top-p", "seed", "ids",
           "threads", "precision", "products"});
  if (!a.has("messages")) throw Error("chat needs --messages FILE.json ([{\"role\": ..., \"content\": ...}, ...])");
  const nlohmann::ordered_json msgs = read_messages(a.str("messages"));
  if (a.has("render")) {
    if (!a.has("model") && !a.has("tokenizer")) throw Error("chat needs --model PATH or --tokenizer DIR|FILE.gguf");
    const ds::LoadedModel m = a.has("model") ? open_model(a) : ds::load_tokenizer(a.str("tokenizer"));
    const std::string text = ds::render_chat(m.chat, msgs, m.name);
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  }
  if (!a.has("model")) throw Error("chat without --render generates the answer: give --model PATH");
  const ds::LoadedModel m = open_model(a);
  ds::SessionOptions o;
  o.sampler = sampler_of(a);
  o.steps = int(a.integer("steps", 0, 0, 1 << 24));
  o.stop_ids = m.stop_ids;
  o.threads = int(a.integer("threads", 1, 1, 256));
  o.products = products_of(a);
  ds::Session s(m.model, m.tokenizer, o);
  s.start(chat_ids(m, msgs), {});
  int prev = s.prompt().back();
  bool first = true;
  while (!s.done()) {
    const int t = s.step();
    if (t < 0 || s.stopped_on_token()) break;
    if (a.has("ids"))
      std::printf(first ? "%d" : " %d", t);
    else
      std::fputs(m.tokenizer->decode(prev, t).c_str(), stdout);
    std::fflush(stdout);
    prev = t;
    first = false;
  }
  std::printf("\n");
  return 0;
}

// A token piece in double quotes, with JSON's escapes for newlines and other controls.
std::string quoted(const std::string& piece) {
  return nlohmann::json(piece).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// The text of every position of a trace (the token's id as "#id" when it has none).
std::vector<std::string> position_texts(const ds::Trace& t) {
  std::vector<std::string> out;
  for (auto& s : t.steps)
    for (size_t i = 0; i < s.input.size(); ++i)
      out.push_back(i < s.input_text.size() && !s.input_text[i].empty() ? s.input_text[i]
                                                                        : "#" + std::to_string(s.input[i]));
  return out;
}

void print_lens(const std::vector<ds::LensRow>& rows, int pos, const std::string& token, const std::string& next,
                int k) {
  std::printf("logit lens at position %d %s", pos, quoted(token).c_str());
  if (!next.empty()) std::printf(", followed by %s", quoted(next).c_str());
  std::printf(": the top %d tokens read from each layer\n", k);
  size_t w = 0;
  for (auto& r : rows) w = std::max(w, r.label.size());
  for (auto& r : rows) {
    std::printf("  %-*s", int(w), r.label.c_str());
    for (size_t i = 0; i < r.ids.size(); ++i) std::printf("  %s %.3f", quoted(r.texts[i]).c_str(), r.probs[i]);
    std::printf("\n");
  }
}

// lens: runs the prompt (and with --steps a generation) recording the logit lens, then
// prints each layer's top tokens at one position.
int cmd_lens(const Args& a) {
  only(a, {"model", "tokenizer", "precision", "prompt", "prompt-ids", "source", "source-ids", "top-k", "position",
           "steps", "temperature", "top-p", "seed", "threads", "json", "products"});
  auto m = open_model(a);
  const ds::Config& c = m.model->cfg;
  const std::vector<int> prompt = prompt_of(a, m);
  ds::SessionOptions o;
  o.sampler.temperature = float(a.number("temperature", 1.0));
  o.sampler.top_p = float(a.number("top-p", 0.9));
  o.sampler.seed = uint64_t(a.integer("seed", 0, 0, (1LL << 62)));
  ds::validate(o.sampler);
  const int k = int(a.integer("top-k", std::min(10, c.vocab_size), 1, c.vocab_size));
  o.trace_options.lens_top_k = k;
  o.steps = a.has("steps") ? int(a.integer("steps", 0, 1, c.max_seq)) : int(prompt.size());
  o.stop_ids = m.stop_ids;
  o.threads = int(a.integer("threads", 1, 1, 256));
  o.products = products_of(a);
  ds::Session s(m.model, m.tokenizer, o);
  s.start(prompt, source_of(a, m));
  while (!s.done()) s.step();
  const ds::Trace& t = s.trace();
  const std::vector<std::string> texts = position_texts(t);
  const int n = int(texts.size());
  const int pos = int(a.integer("position", n - 1, 0, n - 1));
  std::string next;
  int next_id = -1;
  if (pos + 1 < n) {
    next_id = t.tokens()[size_t(pos) + 1];
    next = texts[size_t(pos) + 1];
  } else if (!s.generated().empty() && !s.stopped_on_token()) {
    next_id = s.generated().back();  // drawn from the last position, not run
    next = m.tokenizer ? m.tokenizer->piece(next_id) : "#" + std::to_string(next_id);
  }
  const std::vector<ds::LensRow> rows = ds::recorded_lens(t, pos);
  if (!a.has("json")) {
    print_lens(rows, pos, texts[size_t(pos)], next, k);
    return 0;
  }
  nlohmann::json layers = nlohmann::json::array();
  for (auto& r : rows)
    layers.push_back({{"hook", r.hook}, {"label", r.label}, {"ids", r.ids}, {"texts", r.texts}, {"probs", r.probs}});
  nlohmann::json j{{"position", pos},
                   {"token", t.tokens()[size_t(pos)]},
                   {"text", texts[size_t(pos)]},
                   {"top_k", k},
                   {"layers", std::move(layers)}};
  if (next_id >= 0) {
    j["next"] = next_id;
    j["next_text"] = next;
  }
  std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  return 0;
}

// The ids of this model's tokenizer a random probe should not use (none without one).
std::vector<int> probe_avoid(const ds::LoadedModel& m) {
  if (!m.tokenizer) return {};
  std::vector<int> avoid =
      ds::probe_avoid_ids(m.model->cfg, m.tokenizer->vocab_size(), [&](int id) { return m.tokenizer->piece(id); });
  avoid.insert(avoid.end(), m.stop_ids.begin(), m.stop_ids.end());
  return avoid;
}

// The layer x head table of heads, the strongest head of each kind marked *.
void print_heads(const ds::LoadedModel& m, const ds::HeadRoles& r) {
  std::printf("head detector on %s: %zu positions, %s%d random tokens repeated twice (seed %llu)\n", m.name.c_str(),
              r.probe.size(), r.bos ? "BOS + " : "", r.half, (unsigned long long)r.options.seed);
  std::printf("score: the share of each head's attention on the cells of its pattern (TransformerLens, \"mul\")");
  if (r.options.exclude_bos || r.options.exclude_current_token)
    std::printf("; excluding %s", r.options.exclude_bos && r.options.exclude_current_token
                                      ? "position 0 and the current token"
                                  : r.options.exclude_bos ? "position 0"
                                                          : "the current token");
  std::printf("\n\nlayer  head  previous  duplicate  induction\n");
  int best[ds::kHeadKinds];
  for (int k = 0; k < ds::kHeadKinds; ++k) best[k] = r.strongest(k);
  for (int l = 0; l < r.n_layers; ++l)
    for (int h = 0; h < r.n_heads; ++h) {
      const int i = l * r.n_heads + h;
      char cell[64];
      std::snprintf(cell, sizeof cell, "%5d %5d", l, h);
      std::string row = cell;
      for (int k = 0; k < ds::kHeadKinds; ++k) {
        std::snprintf(cell, sizeof cell, "  %*.3f%s", k == 0 ? 8 : 9, r.score(k, l, h), best[k] == i ? "*" : " ");
        row += cell;
      }
      row.erase(row.find_last_not_of(' ') + 1);
      std::printf("%s\n", row.c_str());
    }
  std::printf("\nstrongest:");
  for (int k = 0; k < ds::kHeadKinds; ++k) {
    const int i = best[k];
    if (i < 0) continue;
    std::printf("%s %s %.3f (layer %d head %d)", k ? "," : "", ds::head_kind_name(k),
                r.score(k, i / r.n_heads, i % r.n_heads), i / r.n_heads, i % r.n_heads);
  }
  std::printf("\n");
}

nlohmann::json heads_json(const ds::LoadedModel& m, const ds::HeadRoles& r) {
  nlohmann::json heads = nlohmann::json::array();
  for (int l = 0; l < r.n_layers; ++l)
    for (int h = 0; h < r.n_heads; ++h)
      heads.push_back({{"layer", l},
                       {"head", h},
                       {"previous", r.score(ds::kPreviousHead, l, h)},
                       {"duplicate", r.score(ds::kDuplicateHead, l, h)},
                       {"induction", r.score(ds::kInductionHead, l, h)}});
  nlohmann::json strongest = nlohmann::json::object();
  for (int k = 0; k < ds::kHeadKinds; ++k)
    if (const int i = r.strongest(k); i >= 0)
      strongest[ds::head_kind_name(k)] = {
          {"layer", i / r.n_heads}, {"head", i % r.n_heads}, {"score", r.score(k, i / r.n_heads, i % r.n_heads)}};
  nlohmann::json j{{"model", m.name},
                   {"n_layers", r.n_layers},
                   {"n_heads", r.n_heads},
                   {"half", r.half},
                   {"seed", r.options.seed},
                   {"bos", r.bos},
                   {"exclude_bos", r.options.exclude_bos},
                   {"exclude_current_token", r.options.exclude_current_token},
                   {"probe", r.probe},
                   {"heads", std::move(heads)},
                   {"strongest", std::move(strongest)}};
  if (!r.source.empty()) j["source"] = r.source;
  return j;
}

// A change or a probability with 4 significant digits (scientific when small): never a
// "-0.000" that hides a real change.
std::string sig4(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.4g", v);
  return b;
}

// A probability from its log: 4 significant digits, and above 0.9995 as "1-q" (q = 1 - p
// to 4 digits, from expm1 so that nothing is lost), where 4 digits of p would read 1.
std::string prob4(double logp) {
  const double q = -std::expm1(logp);
  if (q > 0 && q < 5e-4) return "1-" + sig4(q);
  return sig4(std::exp(logp));
}

std::string head_name(ds::HeadSite site, int l, int h) {
  return std::string(site == ds::HeadSite::Cross ? "cross " : "") + "L" + std::to_string(l) + " H" + std::to_string(h);
}

// "L:H" or "cL:H" (cross-attention).
void parse_head(const std::string& v, ds::HeadSite& site, int& l, int& h) {
  std::string s = v;
  site = ds::HeadSite::Self;
  if (!s.empty() && (s[0] == 'c' || s[0] == 'C')) site = ds::HeadSite::Cross, s.erase(0, 1);
  char* end = nullptr;
  l = int(std::strtol(s.c_str(), &end, 10));
  if (end == s.c_str() || *end != ':') throw Error("--head expects LAYER:HEAD or cLAYER:HEAD, got '" + v + "'");
  const char* hp = end + 1;
  h = int(std::strtol(hp, &end, 10));
  if (end == hp || *end) throw Error("--head expects LAYER:HEAD or cLAYER:HEAD, got '" + v + "'");
}

std::string piece_of(const ds::LoadedModel& m, int id) {
  return m.tokenizer ? m.tokenizer->piece(id) : "#" + std::to_string(id);
}

// heads --ablation --head: one head switched off at every step, largest change first.
int print_head_steps(const Args& a, const ds::LoadedModel& m, const ds::Trace& t, int threads) {
  ds::HeadSite site;
  int l, h;
  parse_head(a.str("head"), site, l, h);
  std::vector<ds::StepEffect> v = ds::head_across_steps(m.model, t, site, l, h, threads);
  std::stable_sort(v.begin(), v.end(), [](const ds::StepEffect& x, const ds::StepEffect& y) {
    return std::fabs(x.delta) > std::fabs(y.delta);
  });
  if (a.has("json")) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& e : v)
      rows.push_back({{"step", e.step + 1}, {"token", e.token}, {"logp", e.logp}, {"delta", e.delta}});
    nlohmann::json j{{"model", m.name}, {"head", a.str("head")}, {"steps", std::move(rows)}};
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  std::printf("%s switched off alone at each step of %s, largest change first\n", head_name(site, l, h).c_str(),
              m.name.c_str());
  std::printf("\n step  token                 log p on  change (log p)  p on        change (p)\n");
  for (const auto& e : v)
    std::printf("%5d  %-20s  %-9s %-15s %-11s %s\n", e.step + 1, piece_of(m, e.token).c_str(), sig4(e.logp).c_str(),
                sig4(e.delta).c_str(), prob4(e.logp).c_str(),
                sig4(std::exp(e.logp + e.delta) - std::exp(e.logp)).c_str());
  return 0;
}

// heads --ablation: every head switched off alone at one step, ranked (probe/ablation.h).
int cmd_heads_ablation(const Args& a) {
  only(a, {"ablation", "model", "tokenizer", "precision", "prompt", "prompt-ids", "source", "source-ids", "steps",
           "step", "head", "temperature", "top-p", "seed", "threads", "json"});
  auto m = open_model(a);
  const ds::Config& c = m.model->cfg;
  const std::vector<int> prompt = prompt_of(a, m);
  ds::SessionOptions o;
  o.sampler.temperature = float(a.number("temperature", 1.0));
  o.sampler.top_p = float(a.number("top-p", 0.9));
  o.sampler.seed = uint64_t(a.integer("seed", 0, 0, (1LL << 62)));
  ds::validate(o.sampler);
  o.steps = a.has("steps") ? int(a.integer("steps", 0, 1, c.max_seq)) : int(prompt.size()) + 1;
  o.stop_ids = m.stop_ids;
  const int threads = int(a.integer("threads", 1, 1, 256));
  o.threads = threads;
  ds::Session s(m.model, m.tokenizer, o);
  s.start(prompt, source_of(a, m));
  while (!s.done()) s.step();
  const ds::Trace& t = s.trace();
  int last = int(t.steps.size());
  while (last > 0 && !t.steps[size_t(last) - 1].sample) --last;
  if (last == 0) throw Error("no step drew a token: give more --steps");
  if (a.has("head")) return print_head_steps(a, m, t, threads);
  const int k = int(a.integer("step", last, 1, last)) - 1;
  ds::HeadAblation r = ds::ablate_heads(m.model, ds::ablation_step(t, k), threads);
  ds::rank_by_effect(r.heads);
  if (a.has("json")) {
    nlohmann::json heads = nlohmann::json::array();
    for (const auto& e : r.heads)
      heads.push_back({{"site", e.site == ds::HeadSite::Cross ? "cross" : "self"},
                       {"layer", e.layer},
                       {"head", e.head},
                       {"logp", e.logp},
                       {"delta", e.delta}});
    nlohmann::json j{{"model", m.name},  {"step", k + 1},
                     {"token", r.token}, {"text", piece_of(m, r.token)},
                     {"logp", r.logp},   {"heads", std::move(heads)}};
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  std::printf("step %d of %d on %s chose '%s' (id %d): log p = %s, p = %s with every head on\n", k + 1, last,
              m.name.c_str(), piece_of(m, r.token).c_str(), r.token, sig4(r.logp).c_str(), prob4(r.logp).c_str());
  std::printf("each head switched off alone, largest change first\n\n");
  std::printf("rank  head          log p off  change (log p)  p off       change (p)\n");
  for (size_t i = 0; i < r.heads.size(); ++i) {
    const auto& e = r.heads[i];
    std::printf("%4zu  %-12s  %-10s %-15s %-11s %s\n", i + 1, head_name(e.site, e.layer, e.head).c_str(),
                sig4(e.logp).c_str(), sig4(e.delta).c_str(), prob4(e.logp).c_str(),
                sig4(std::exp(e.logp) - std::exp(r.logp)).c_str());
  }
  return 0;
}

// heads: the head detector (probe/heads.h) on every decoder self-attention head.
int cmd_heads(const Args& a) {
  if (a.has("ablation")) return cmd_heads_ablation(a);
  only(a, {"model", "tokenizer", "precision", "half", "seed", "exclude-bos", "exclude-current-token", "json", "threads",
           "products"});
  auto m = open_model(a);
  const ds::Config& c = m.model->cfg;
  ds::HeadDetectOptions o;
  o.half = int(a.integer("half", 0, 0, std::max(1, (c.max_seq - (c.bos_id >= 0 ? 1 : 0)) / 2)));
  o.seed = uint64_t(a.integer("seed", 1, 0, (1LL << 62)));
  o.exclude_bos = a.has("exclude-bos");
  o.exclude_current_token = a.has("exclude-current-token");
  o.threads = int(a.integer("threads", 1, 1, 256));
  o.products = products_of(a);
  o.avoid = probe_avoid(m);
  o.keep_patterns = false;
  const ds::HeadRoles r = ds::detect_heads(m.model, o);
  if (a.has("json"))
    std::printf("%s\n", heads_json(m, r).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  else
    print_heads(m, r);
  return 0;
}

// The process's peak resident memory so far (getrusage), in MB.
double max_rss_mb() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024;
}

int cmd_bench(const Args& a) {
  only(a,
       {"model", "tokenizer", "steps", "threads", "reps", "precision", "prefill", "trace-tokens", "copy", "products"});
  if (!a.has("model")) throw Error("--model PATH is required");
  ds::LoadedModel m;
  const ds::LoadSplit load = ds::measure_load(a.str("model"), a.str("tokenizer"), precision_of(a), m, !a.has("copy"));
  const double loaded_rss_mb = max_rss_mb();
  const ds::Config& c = m.model->cfg;
  ds::DecodeBenchOptions o;
  o.steps = int(a.integer("steps", std::min(c.max_seq, 64), 2, c.max_seq));
  o.threads = int(a.integer("threads", 1, 1, 256));
  o.reps = int(a.integer("reps", 5, 1, 100));
  o.products = products_of(a);
  o.prefill = int(a.integer("prefill", std::min(c.max_seq, 512), 0, c.max_seq));
  o.trace_tokens = int(a.integer("trace-tokens", 0, 0, c.max_seq));
  std::printf("model                   %s: %s\n", m.name.c_str(), c.describe().c_str());
  std::printf("weights                 %.2f M parameters, %.1f MB in memory (%s)\n", m.model->w.parameter_count() / 1e6,
              m.model->w.bytes() / 1e6, ds::precision_name(m.precision));
  std::fflush(stdout);
  auto r =
      ds::run_decode_bench(m.model, o, [](const std::string& s) { std::fprintf(stderr, "  ... %s\n", s.c_str()); });
  ds::print_decode_bench(stdout, r, o);
  ds::print_load_split(stdout, load);
  double user = 0, sys = 0;
  ds::process_times(user, sys);
  std::printf("whole run               user %.2f s, system %.2f s (getrusage)\n", user, sys);
  std::printf(
      "peak memory             %.1f MB once loaded (max RSS; weights %.1f MB), %.1f MB at the end (with the\n"
      "                        bandwidth probe's buffer, KV caches and scratch)\n",
      loaded_rss_mb, m.model->w.bytes() / 1e6, max_rss_mb());
  return 0;
}

int cmd_inspect(const Args& a) {
  only(a, {"model", "tokenizer", "precision"});
  auto m = open_model(a);
  const ds::Config& c = m.model->cfg;
  std::printf("model      %s (%s)\n", m.name.c_str(), m.kind.c_str());
  if (m.kind.rfind("hf ", 0) == 0)
    std::printf("files      %s; kept as %s (%.1f MB of weights)\n", m.file_dtypes.c_str(),
                ds::precision_name(m.precision), m.model->w.bytes() / 1e6);
  else if (m.storage.empty())
    std::printf("precision  %s (%.1f MB of weights)\n", ds::precision_name(m.precision), m.model->w.bytes() / 1e6);
  else
    std::printf("storage    %s (%.1f MB of weights)\n", m.storage.c_str(), m.model->w.bytes() / 1e6);
  std::printf("arch       %s\n", c.describe().c_str());
  std::printf("params     %lld\n", (long long)m.model->w.parameter_count());
  std::printf("tokenizer  %s%s\n", m.tokenizer ? "yes" : "none found",
              m.chat.template_text.empty() ? "" : ", with a chat template (chat, generate --chat)");
  auto& w = const_cast<ds::Weights&>(m.model->w);
  // Each storage type's tensors and bytes, then the memory a run takes: the weights and
  // the KV cache at the full context (float32 keys and values of every layer).
  std::map<std::string, std::pair<int, double>> by_type;
  for (auto& t : w.tensors()) {
    auto& e = by_type[ds::precision_name(t.type)];
    e.first += 1;
    e.second += double(t.rows) * double(ds::row_bytes(t.type, t.cols));
  }
  for (auto& [type, e] : by_type) std::printf("  %-10s %4d tensors %10.1f MB\n", type.c_str(), e.first, e.second / 1e6);
  const double kv = 2.0 * c.n_layers * c.max_seq * c.kv_dim() * 4.0;
  std::printf("memory     %.1f MB weights + %.1f MB KV cache at %d positions\n", m.model->w.bytes() / 1e6, kv / 1e6,
              c.max_seq);
  for (auto& t : w.tensors())
    std::printf("  %-28s [%lld, %lld] %s\n", t.name.c_str(), (long long)t.rows, (long long)t.cols,
                ds::precision_name(t.type));
  return 0;
}

// tokenize --model PATH [--tokenizer FILE] | --tokenizer DIR, then TEXT or --jsonl.
int cmd_tokenize(const Args& a) {
  only(a, {"model", "tokenizer", "jsonl"});
  std::shared_ptr<const ds::Tokenizer> tok;
  bool bos = false;
  if (a.has("model")) {
    auto m = open_model(a);
    if (!m.tokenizer) throw Error("no tokenizer: give --tokenizer FILE");
    tok = m.tokenizer;
    bos = m.bos_prompt;
  } else if (a.has("tokenizer")) {
    // Without a model only Hugging Face / GPT-2 tokenizers and GGUF files: a llama2.c
    // tokenizer.bin does not say its vocabulary size. The ids are the text's alone (no BOS).
    const std::string path = a.str("tokenizer");
    std::error_code ec;
    if (ds::is_hf_tokenizer(path)) {
      tok = ds::load_hf_tokenizer(path).tokenizer;
    } else if (std::filesystem::is_directory(path, ec)) {
      tok = ds::load_gpt2_tokenizer_dir(path);
    } else if (std::filesystem::is_regular_file(path, ec) && ds::is_gguf_file(path)) {
      tok = ds::make_vocab_tokenizer(ds::read_gguf_vocab(path));
    } else if (std::filesystem::is_regular_file(path, ec) && path.size() >= 5 &&
               path.compare(path.size() - 5, 5, ".json") == 0) {
      tok = std::make_shared<ds::GPT2Tokenizer>(ds::GPT2Tokenizer::from_tokenizer_json(path));
    } else if (std::filesystem::exists(path, ec)) {
      throw Error("--tokenizer " + path +
                  " without --model must be a folder with vocab.json + merges.txt or tokenizer.json, a "
                  "tokenizer.json file or a GGUF file; a llama2.c tokenizer.bin needs the model's vocabulary size: "
                  "give --model PATH too");
    } else {
      throw Error("--tokenizer " + path + ": no such file or folder");
    }
  } else {
    throw Error("tokenize needs --model PATH or --tokenizer DIR|FILE.json|FILE.gguf");
  }
  auto print_ids = [](const std::vector<int>& ids) {
    for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? " %d" : "%d", ids[i]);
    std::printf("\n");
  };
  if (!a.has("jsonl")) {
    if (a.pos.size() != 1) throw Error("tokenize takes one TEXT argument (or --jsonl)");
    print_ids(tok->encode(a.pos[0], bos));
    return 0;
  }
  // One JSON object {"text": ...} a line on stdin; {"text": ..., "ids": [...]} a line out.
  if (!a.pos.empty()) throw Error("tokenize --jsonl reads standard input and takes no TEXT argument");
  std::string line;
  for (long line_no = 1; std::getline(std::cin, line); ++line_no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json in;
    try {
      in = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      std::string why = e.what();  // "[json.exception...] parse error at line 1, column C: why"
      if (auto c = why.find("column "); c != std::string::npos && why.find(": ", c) != std::string::npos)
        why = "at " + why.substr(c, why.find(": ", c) - c) + ": " + why.substr(why.find(": ", c) + 2);
      throw Error("standard input line " + std::to_string(line_no) + ": invalid JSON " + why);
    }
    if (!in.is_object() || !in.contains("text") || !in["text"].is_string())
      throw Error("standard input line " + std::to_string(line_no) + ": expected an object with a string \"text\"");
    nlohmann::ordered_json out;
    out["text"] = in["text"];
    out["ids"] = tok->encode(in["text"].get_ref<const std::string&>(), false);  // the text's ids alone
    const std::string s = out.dump() + "\n";
    std::fwrite(s.data(), 1, s.size(), stdout);
  }
  if (std::cin.bad()) throw Error("error reading standard input");
  return 0;
}

// A GPT-2-shaped model folder with random weights. Its tokenizer is a placeholder
// vocabulary (printable ASCII, then <tN> entries), enough to run and time it.
int random_gpt2(const Args& a) {
  const int dim = int(a.integer("dim", 768, 2, 1 << 16));
  const int heads = int(a.integer("heads", 12, 1, 1024));
  if (dim % heads) throw Error("--dim must be a multiple of --heads");
  ds::Config c =
      ds::gpt2_config(dim, int(a.integer("layers", 12, 1, 1024)), heads, int(a.integer("seq-len", 1024, 1, 1 << 20)),
                      int(a.integer("vocab", 50257, 96, 1 << 22)));
  const std::string dtype = a.has("dtype") ? a.str("dtype") : "F32";
  ds::Weights w = ds::Weights::random(c, uint64_t(a.integer("seed", 1, 0, 1LL << 62)), 0.02f);
  nlohmann::json vocab = nlohmann::json::array();
  for (int i = 0; i < c.vocab_size; ++i)
    vocab.push_back(i < 95 ? std::string(1, char(32 + i)) : "<t" + std::to_string(i) + ">");
  ds::save_model_folder(a.str("out"), c, w, {{"kind", "chars"}, {"vocab", vocab}}, {}, dtype);
  std::printf("wrote %s: %s, %.1f M parameters, %s\n", a.str("out").c_str(), c.describe().c_str(),
              w.parameter_count() / 1e6, dtype.c_str());
  return 0;
}

int cmd_random(const Args& a) {
  only(a, {"out", "dim", "hidden", "layers", "heads", "kv-heads", "vocab", "seq-len", "seed", "arch", "dtype"});
  if (!a.has("out")) throw Error("--out FILE is required");
  const std::string arch = a.has("arch") ? a.str("arch") : "llama2c";
  if (arch == "gpt2") return random_gpt2(a);
  if (arch != "llama2c") throw Error("--arch must be llama2c or gpt2");
  if (a.has("dtype")) throw Error("--dtype is for --arch gpt2 folders; llama2.c checkpoints are float32");
  int dim = int(a.integer("dim", 768, 2, 1 << 16));
  int heads = int(a.integer("heads", 12, 1, 1024));
  ds::Config c =
      ds::llama2c_config(dim, int(a.integer("hidden", 2048, 1, 1 << 18)), int(a.integer("layers", 12, 1, 1024)), heads,
                         int(a.integer("kv-heads", heads, 1, 1024)), int(a.integer("vocab", 32000, 3, 1 << 22)),
                         int(a.integer("seq-len", 1024, 1, 1 << 20)), true);
  ds::Weights w = ds::Weights::random(c, uint64_t(a.integer("seed", 1, 0, 1LL << 62)), 0.02f);
  ds::save_llama2c(a.str("out"), c, w);
  std::printf("wrote %s: %s, %.1f M parameters\n", a.str("out").c_str(), c.describe().c_str(),
              w.parameter_count() / 1e6);
  return 0;
}

}  // namespace

// convert: a trace read in either format, written in the one --out names, each timed.
int cmd_convert(const Args& a) {
  only(a, {"in", "out"});
  if (!a.has("in") || !a.has("out")) throw Error("convert needs --in TRACE and --out TRACE");
  namespace fs = std::filesystem;
  using clock = std::chrono::steady_clock;
  const std::string in = a.str("in"), out = a.str("out");
  auto secs = [](clock::time_point t0) { return std::chrono::duration<double>(clock::now() - t0).count(); };
  auto mb = [](const std::string& f) { return double(fs::file_size(f)) / (1 << 20); };
  auto t0 = clock::now();
  const ds::Trace t = ds::Trace::load(in);
  std::printf("read %s (%s, %.1f MB, %zu steps, %d positions) in %.2f s\n", in.c_str(),
              ds::Trace::is_binary(in) ? "binary" : "JSON", mb(in), t.steps.size(),
              t.positions(int(t.steps.size()) - 1), secs(t0));
  t0 = clock::now();
  t.save(out);
  std::printf("wrote %s (%s, %.1f MB) in %.2f s\n", out.c_str(), ds::Trace::is_binary(out) ? "binary" : "JSON", mb(out),
              secs(t0));
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  std::printf("peak memory (max RSS) %.1f MB; the trace holds %.1f MB\n", double(ru.ru_maxrss) / 1024,
              double(t.bytes()) / (1 << 20));
  return 0;
}

int main(int argc, char** argv) {
  try {
    if (argc >= 2 &&
        (!std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help"))) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (wants_help(argc, argv)) {
      const std::string u = command_usage(argv[1]);
      if (u.empty()) throw Error(std::string("unknown command '") + argv[1] + "'; try decoderscope-cli --help");
      std::fputs(u.c_str(), stdout);
      return 0;
    }
    // train, eval and batch parse their own options (app/cli/train_cmds.cpp).
    if (argc >= 2 && !std::strcmp(argv[1], "train")) return cmd_train(argc, argv);
    if (argc >= 2 && !std::strcmp(argv[1], "eval")) return cmd_eval(argc, argv);
    if (argc >= 2 && !std::strcmp(argv[1], "batch")) return cmd_batch(argc, argv);
    if (argc >= 2 && !std::strcmp(argv[1], "attribute")) return cmd_attribute(argc, argv);
    if (argc >= 2 && !std::strcmp(argv[1], "patch")) return cmd_patch(argc, argv);
    Args a = parse(argc, argv);
    if (a.cmd == "generate") return cmd_generate(a);
    if (a.cmd == "lens") return cmd_lens(a);
    if (a.cmd == "heads") return cmd_heads(a);
    if (a.cmd == "bench") return cmd_bench(a);
    if (a.cmd == "hooks") return cmd_hooks(a);
    if (a.cmd == "inspect") return cmd_inspect(a);
    if (a.cmd == "tokenize") return cmd_tokenize(a);
    if (a.cmd == "chat") return cmd_chat(a);
    if (a.cmd == "random") return cmd_random(a);
    if (a.cmd == "convert") return cmd_convert(a);
    throw Error("unknown command '" + a.cmd + "'; try decoderscope-cli --help");
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "decoderscope-cli: error: %s\n", e.what());
    return 1;
  }
}
