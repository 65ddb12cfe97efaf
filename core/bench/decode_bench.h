#pragma once
// The decode benchmark shared by `decoderscope-cli bench` and tests/bench: the
// machine's read bandwidth and the floor it sets, decode time with no observer and
// with the window's default observers, a long prompt's prefill against the same
// number of single-token steps, and the trace's memory. Every figure is measured in
// the same process, so the printed ratios compare like with like.
#include <cstdio>
#include <functional>
#include <memory>
#include <string>

#include "bench/bandwidth.h"
#include "model/model.h"
#include "perf/memory.h"

namespace ds {

struct DecodeBenchOptions {
  int threads = 1;
  Products products = Products::Exact;  // quantized weights' products (Engine::set_products)
  int steps = 64;                       // positions decoded per timed run (from a one-token prompt)
  int reps = 5;                         // timed runs of each kind (median), after one warm-up run
  int prefill = 512;                    // prompt length for the prefill timing; 0 skips it
  int trace_tokens =
      0;  // > 0: also generate this many positions with the default observers and report the trace's bytes
  size_t bandwidth_bytes = size_t(512) << 20;
};

struct DecodeBenchResult {
  Bandwidth bandwidth;        // read rate: median and best of every probe pass, interleaved with the decode runs
  double weight_bytes = 0;    // bytes of parameters one token reads (decoder blocks, final norm, head)
  double kv_bytes = 0;        // KV-cache bytes one token reads, averaged over the timed positions
  double floor_ms = 0;        // (weight_bytes + kv_bytes) / median bandwidth
  double plain_ms = 0;        // median decode ms/token, no observer
  double plain_token_ms = 0;  // the median token of those runs (a probe pass before each token)
  // Runs with nothing between their tokens (no probe pass, no products alone): the median
  // of the runs' mean ms/token, and their median token.
  double back_to_back_ms = 0, back_to_back_token_ms = 0;
  double observed_ms = 0;  // median decode ms/token, default observers recording (compact trace)
  // Medians of per-run ratios: each run's time over the floor at the mean rate of the
  // probes just before and after it, and each observed run over the plain run before it.
  double plain_over_floor = 0, observed_over_floor = 0, observed_over_plain = 0;
  // The same step's matrix-vector products alone (Engine::decode_products), timed after
  // every plain token between probe passes like the decode: median ms and ratio to the
  // weights' floor, and the median over tokens of each token's time over the products
  // timed right after it. What a whole step costs beyond them is its other work: norms,
  // attention, sampling and the candidate table.
  double products_ms = 0, products_over_floor = 0, steps_over_products = 0;
  size_t observed_trace_bytes = 0;  // the trace of one observed run (steps positions)
  double prefill_ms = 0;            // one forward over the prompt (logits of the last position)
  double steps_ms = 0;              // the same prompt fed one token at a time
  double prefill_gflop = 0;         // arithmetic of the prefill, 2 flops per multiply-add
  int trace_tokens = 0;
  size_t trace_bytes = 0;  // trace held after trace_tokens positions
  double trace_seconds = 0;
  // Where the weights sit when the timing starts: resident bytes and the share of them in
  // huge pages (perf/memory.h's page_share over the weight block or the mapped file),
  // and the seconds the model's background move into huge pages took (-1: none ran).
  PageShare weight_pages;
  double huge_pages_seconds = -1;
};

// Bytes of parameters a decode step reads: every decoder block, the final norm and
// the output head (the token embedding counts only as the head when tied; one
// embedding row and one position row are negligible).
double decode_weight_bytes(const Model& m);

// Floating-point operations of a T-token prefill from an empty cache (last-position
// logits only): the decoder's matrix products and the causal attention.
double prefill_flops(const Config& c, int T);

// Runs the benchmark; progress (one line per phase) goes to `log` when given.
DecodeBenchResult run_decode_bench(std::shared_ptr<const Model> m, const DecodeBenchOptions& o,
                                   const std::function<void(const std::string&)>& log = {});

// Prints the result as an aligned table with the ratios.
void print_decode_bench(std::FILE* f, const DecodeBenchResult& r, const DecodeBenchOptions& o);

}  // namespace ds
