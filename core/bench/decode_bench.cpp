#include "bench/decode_bench.h"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <utility>
#include <vector>

#include "perf/bf16_fast.h"
#include "probe/trace.h"
#include "session/session.h"

namespace ds {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

int start_token(const Config& c) { return c.bos_id >= 0 ? c.bos_id : (c.eos_id >= 0 ? c.eos_id : 0); }

// Bytes of keys and values a decode step reads from the cache over `positions` positions.
double kv_bytes(const Config& c, double positions) { return 2.0 * c.n_layers * c.kv_dim() * sizeof(float) * positions; }

// One timed generation of `steps` positions from a one-token prompt; the first
// step is not counted.
struct DecodeRun {
  double ms = 0;                 // mean ms per counted token
  std::vector<double> token_ms;  // each counted token's ms
  std::vector<double> ratios;    // with a probe: each token's time over its floor
  // With an engine for the products: after each token (and its probe pass) the step's
  // products alone, their ms and ratio to the weights' floor, and the token's time over
  // theirs.
  std::vector<double> products_ms, products_ratios, step_over_products;
};

// With a probe, a pass over the probe's buffer follows every token (and precedes the
// first), and each token is compared with the floor at the mean rate of the passes
// either side of it, for the bytes it read (weights plus the cache up to its
// position): drift on the scale of seconds then cancels out of the ratio.
DecodeRun time_decode(const std::shared_ptr<const Model>& m, int steps, int threads, Products products, bool observed,
                      size_t* trace_bytes, ReadProbe* probe = nullptr, double weight_bytes = 0,
                      const Engine* products_engine = nullptr) {
  SessionOptions o;
  o.sampler.temperature = 0;
  o.steps = steps;
  o.threads = threads;
  o.products = products;
  if (observed) {
    o.record = default_record_patterns(m->cfg);
    o.trace_options.compact = true;
  }
  const Config& c = m->cfg;
  Session s(m, nullptr, o);
  std::vector<int> src;
  if (c.encoder_decoder) src.assign(std::min(8, c.max_src), start_token(c));
  s.start({start_token(c)}, src);
  s.step();
  DecodeRun run;
  std::vector<float> buf;
  if (products_engine) products_engine->decode_products(buf);  // sizes the buffer
  double rate = probe ? probe->pass() : 0;
  int n = 0;
  while (!s.done()) {
    const auto t0 = Clock::now();
    s.step();
    const double ms = ms_since(t0);
    ++n;
    run.token_ms.push_back(ms);
    if (probe) {
      const double next = probe->pass();
      const double bytes = weight_bytes + kv_bytes(c, n + 1);
      run.ratios.push_back(ms / (bytes / (0.5 * (rate + next) * 1e9) * 1e3));
      rate = next;
      if (products_engine) {
        const auto t1 = Clock::now();
        products_engine->decode_products(buf);
        const double pms = ms_since(t1);
        const double after = probe->pass();
        run.products_ms.push_back(pms);
        run.products_ratios.push_back(pms / (weight_bytes / (0.5 * (rate + after) * 1e9) * 1e3));
        run.step_over_products.push_back(ms / pms);
        rate = after;
      }
    }
  }
  run.ms = std::accumulate(run.token_ms.begin(), run.token_ms.end(), 0.0) / std::max(1, n);
  if (trace_bytes) *trace_bytes = s.trace().bytes();
  return run;
}

// Runs of `steps` positions with nothing between their tokens (no probe pass, no
// products alone), as a generation runs and as llama-bench's tg times it: the median of
// the runs' mean token times and the median token over all of them.
void time_back_to_back(const std::shared_ptr<const Model>& m, int steps, const DecodeBenchOptions& o,
                       DecodeBenchResult& r, const std::function<void(const std::string&)>& say) {
  say("decode back to back");
  std::vector<double> means, tokens;
  for (int i = 0; i < std::max(1, o.reps); ++i) {
    const DecodeRun run = time_decode(m, steps, o.threads, o.products, false, nullptr);
    means.push_back(run.ms);
    tokens.insert(tokens.end(), run.token_ms.begin(), run.token_ms.end());
  }
  r.back_to_back_ms = median(means);
  r.back_to_back_token_ms = median(tokens);
}

// A prompt of o.prefill tokens in one forward (median of 3) against the same tokens
// fed one at a time.
void time_prefill(const std::shared_ptr<const Model>& m, const DecodeBenchOptions& o, DecodeBenchResult& r,
                  const std::function<void(const std::string&)>& say) {
  const Config& c = m->cfg;
  const int T = std::min(o.prefill, c.max_seq);
  std::vector<int> prompt(static_cast<size_t>(T));
  for (int i = 0; i < T; ++i) prompt[size_t(i)] = (start_token(c) + 7 * i) % c.vocab_size;
  Engine e(m);
  e.set_threads(o.threads);
  e.set_products(o.products);
  say("prefill of " + std::to_string(T) + " tokens");
  e.forward(prompt);  // warm-up (scratch buffers)
  std::vector<double> pre;
  for (int i = 0; i < 3; ++i) {
    e.reset();
    auto t0 = Clock::now();
    e.forward(prompt);
    pre.push_back(ms_since(t0));
  }
  r.prefill_ms = median(pre);
  say("the same prompt one token at a time");
  e.reset();
  auto t0 = Clock::now();
  for (int i = 0; i < T; ++i) e.forward(std::span<const int>(&prompt[size_t(i)], 1));
  r.steps_ms = ms_since(t0);
  r.prefill_gflop = prefill_flops(c, T) / 1e9;
}

}  // namespace

double decode_weight_bytes(const Model& m) {
  double n = 0;
  auto& w = const_cast<Weights&>(m.w);
  const bool tied = w.lm_head.size() == 0 && w.lm_head16.empty();
  for (auto& t : w.tensors()) {
    const std::string& nm = t.name;
    const bool block = nm.rfind("blocks.", 0) == 0;
    const bool head = nm == "lm_head" || (tied && nm == "tok_embed");
    if (block || head || nm.rfind("ln_final", 0) == 0) n += double(t.rows) * double(row_bytes(t.type, t.cols));
  }
  return n;
}

double prefill_flops(const Config& c, int T) {
  const double d = c.d_model, q = c.q_dim(), kv = c.kv_dim(), f = c.d_ff;
  double per_token = 2 * (d * q + 2 * d * kv + q * d);  // q, k, v, o
  per_token += 2 * d * f * (c.gated() ? 3 : 2);         // up (gate) down
  double flops = double(T) * per_token * c.n_layers;
  // Causal attention: the products are computed over the full T x T square (masked
  // cells are then discarded), scores and mix: 2 * 2 * T * T * d_head per head.
  flops += 4.0 * T * T * c.d_head * c.n_heads * c.n_layers;
  flops += 2.0 * c.vocab_size * d;  // head, last position only
  return flops;
}

DecodeBenchResult run_decode_bench(std::shared_ptr<const Model> m, const DecodeBenchOptions& o,
                                   const std::function<void(const std::string&)>& log) {
  auto say = [&](const std::string& s) {
    if (log) log(s);
  };
  const Config& c = m->cfg;
  DecodeBenchResult r;
  const int steps = std::clamp(o.steps, 2, c.max_seq);
  r.weight_bytes = decode_weight_bytes(*m);
  // Keys and values of every layer up to the position, averaged over positions 1..steps-1.
  r.kv_bytes = kv_bytes(c, steps / 2.0);

  if (m->huge_pages) {
    say("moving the weights into huge pages");
    r.huge_pages_seconds = m->huge_pages->wait();  // else the first runs would time a copy
  }
  if (m->w.mapped)
    r.weight_pages = page_share(m->w.mapped->data(), m->w.mapped->size());
  else if (m->w.large_block)
    r.weight_pages = page_share(m->w.large_block.get(), 1);  // the block is one mapping
  say("bandwidth and warm-up");
  // The machine's rate drifts (shared hosts, frequency), so a pass of the probe runs
  // between every two tokens and each token is compared with the rate measured on
  // either side of it (time_decode); plain and observed runs alternate. The ratios
  // are medians over all tokens of a kind; the figures beside them are medians of
  // the runs' mean times and of all the probe's passes.
  ReadProbe probe(o.threads, o.bandwidth_bytes);
  {
    const Bandwidth b = probe.measure(3);
    r.bandwidth.bytes = b.bytes;
    r.bandwidth.threads = b.threads;
  }
  time_decode(m, std::min(steps, 16), o.threads, o.products, false, nullptr);  // warm-up: caches, pages, thread pool
  // The products alone run on an engine of their own after every plain token, so that
  // each token has its products measured in the same state of the machine.
  Engine products(m);
  products.set_threads(o.threads);
  products.set_products(o.products);
  std::vector<double> plain, observed, plain_ratio, observed_ratio, pair_ratio, prod_ms, prod_ratio, over_products,
      plain_tokens;
  for (int i = 0; i < std::max(1, o.reps); ++i) {
    say("decode run " + std::to_string(i + 1) + " of " + std::to_string(std::max(1, o.reps)));
    const DecodeRun p = time_decode(m, steps, o.threads, o.products, false, nullptr, &probe, r.weight_bytes, &products);
    const DecodeRun q =
        time_decode(m, steps, o.threads, o.products, true, &r.observed_trace_bytes, &probe, r.weight_bytes);
    plain.push_back(p.ms);
    plain_tokens.insert(plain_tokens.end(), p.token_ms.begin(), p.token_ms.end());
    observed.push_back(q.ms);
    plain_ratio.insert(plain_ratio.end(), p.ratios.begin(), p.ratios.end());
    prod_ms.insert(prod_ms.end(), p.products_ms.begin(), p.products_ms.end());
    prod_ratio.insert(prod_ratio.end(), p.products_ratios.begin(), p.products_ratios.end());
    over_products.insert(over_products.end(), p.step_over_products.begin(), p.step_over_products.end());
    observed_ratio.insert(observed_ratio.end(), q.ratios.begin(), q.ratios.end());
    pair_ratio.push_back(q.ms / p.ms);
  }
  r.products_ms = median(prod_ms);
  r.products_over_floor = median(prod_ratio);
  r.steps_over_products = median(over_products);
  const std::vector<double>& rates = probe.rates();
  r.bandwidth.median_gb_per_s = median(rates);
  r.bandwidth.gb_per_s = *std::max_element(rates.begin(), rates.end());
  r.plain_ms = median(plain);
  r.observed_ms = median(observed);
  r.floor_ms = (r.weight_bytes + r.kv_bytes) / (r.bandwidth.median_gb_per_s * 1e9) * 1e3;
  r.plain_over_floor = median(plain_ratio);
  r.observed_over_floor = median(observed_ratio);
  r.observed_over_plain = median(pair_ratio);
  r.plain_token_ms = median(plain_tokens);
  time_back_to_back(m, steps, o, r, say);

  if (o.prefill > 0 && !c.encoder_decoder) time_prefill(m, o, r, say);

  if (o.trace_tokens > 0) {
    const int n = std::min(o.trace_tokens, c.max_seq);
    say("generating " + std::to_string(n) + " positions with the default observers");
    auto t0 = Clock::now();
    time_decode(m, n, o.threads, o.products, true, &r.trace_bytes);  // no probe: the time is the trace's
    r.trace_seconds = ms_since(t0) / 1e3;
    r.trace_tokens = n;
  }
  return r;
}

void print_decode_bench(std::FILE* f, const DecodeBenchResult& r, const DecodeBenchOptions& o) {
  std::fprintf(f,
               "threads                 %d (kernels: %s; products with quantized weights: %s; with a GGUF file's BF16 "
               "weights: %s)\n",
               o.threads, gemv_isa(), products_name(o.products),
               o.products == Products::Fast && bf16_fast_available() ? "fast, vdpbf16ps" : "exact");
  std::fprintf(f, "read bandwidth          %.1f GB/s median, %.1f best (STREAM-style read of %zu MB, %d thread(s))\n",
               r.bandwidth.median_gb_per_s, r.bandwidth.gb_per_s, r.bandwidth.bytes >> 20, r.bandwidth.threads);
  std::fprintf(f, "bytes per token         %.1f MB of weights + %.2f MB of KV cache (mean over %d positions)\n",
               r.weight_bytes / 1e6, r.kv_bytes / 1e6, o.steps);
  std::fprintf(f, "floor                   %.2f ms/token (bytes over the median bandwidth)\n", r.floor_ms);
  if (r.weight_pages.resident > 0) {
    std::fprintf(f, "weights' pages          %.0f%% of %.1f MB in huge pages", 100.0 * r.weight_pages.fraction(),
                 double(r.weight_pages.resident) / 1e6);
    if (r.huge_pages_seconds >= 0)
      std::fprintf(f, " (moved there in the background in %.2f s, waited for before timing)", r.huge_pages_seconds);
    std::fprintf(f, "\n");
  }
  std::fprintf(f,
               "decode, no observer     %.2f ms/token (%.1f tokens/s)   measured/floor %.3f   median token %.2f ms\n",
               r.plain_ms, 1e3 / r.plain_ms, r.plain_over_floor, r.plain_token_ms);
  std::fprintf(f, "                        %.1f GB/s of weights and KV cache read (the probe: %.1f GB/s)\n",
               (r.weight_bytes + r.kv_bytes) / (r.plain_ms * 1e6), r.bandwidth.median_gb_per_s);
  std::fprintf(f, "decode, default observers %.2f ms/token               measured/floor %.3f  observed/plain %.3f\n",
               r.observed_ms, r.observed_over_floor, r.observed_over_plain);
  std::fprintf(f, "products alone          %.2f ms/token               measured/floor %.3f (weights only)\n",
               r.products_ms, r.products_over_floor);
  std::fprintf(f, "steps over products     %.3f  (no observer): a step's work beyond its products, %.3f of the floor\n",
               r.steps_over_products, r.products_over_floor * (r.steps_over_products - 1));
  std::fprintf(f,
               "                        (ratios: medians over every token, each against probe passes either side;\n"
               "                        the products alone run after each plain step; a step beyond its products:\n"
               "                        norms, attention, sampling, candidate table)\n");
  if (r.back_to_back_ms > 0)
    std::fprintf(f,
                 "decode, back to back    %.2f ms/token (%.1f tokens/s)   median token %.2f ms\n"
                 "                        (%d positions a run with nothing between the tokens, as a generation\n"
                 "                        runs and llama-bench's tg times them; median of %d runs' means)\n",
                 r.back_to_back_ms, 1e3 / r.back_to_back_ms, r.back_to_back_token_ms, o.steps, std::max(1, o.reps));
  std::fprintf(f, "trace of one run        %.2f MB for %d positions\n", r.observed_trace_bytes / 1e6, o.steps);
  if (r.prefill_ms > 0) {
    std::fprintf(f, "prefill %d tokens       %.1f ms (%.1f tokens/s, %.1f GFLOP/s)\n", o.prefill, r.prefill_ms,
                 o.prefill / (r.prefill_ms / 1e3), r.prefill_gflop / (r.prefill_ms / 1e3));
    std::fprintf(f, "%d single steps         %.1f ms   steps/prefill %.1f\n", o.prefill, r.steps_ms,
                 r.steps_ms / r.prefill_ms);
  }
  if (r.trace_tokens > 0)
    std::fprintf(f, "trace after %d positions %.1f MB (default observers, %.1f s)\n", r.trace_tokens,
                 r.trace_bytes / 1e6, r.trace_seconds);
}

}  // namespace ds
