#pragma once
// Synthetic tasks for the built-in models, generated from a seed.
//
//   dates  (encoder-decoder): a date as a person writes it -> "YYYY-MM-DD" </s>.
//          Years 1900-2099, valid calendar dates only, 13 formats (see DateFormat),
//          each also all lower case and all upper case, day and month numbers with
//          and without a leading zero where a person would write either.
//   adder  (decoder-only): the prompt "a+b=" with a, b in 0..999 (no leading zeros);
//          the model writes the sum REVERSED (least-significant digit first), then
//          </s>: "123+45=" is answered "861" (123 + 45 = 168). Written this way each
//          digit only needs the operand digits of its own column and the carry of the
//          column before, which the model has already written, so the task is
//          learnable by a small model and its attention is readable.
//          Why reversed and not most-significant first: reversed, the k-th output
//          digit needs the k-th-from-last digit of each operand, a lookup relative to
//          '+' and '=' that every position after '=' can make (the model learns it
//          with learned positions and 8 heads of 8 dimensions), and the carry follows
//          from the previous column, whose result the model has just written.
//          Most-significant first, the first digit written already depends on the
//          carries of every column below it (a carry lookahead over up to three
//          columns) and which column a digit belongs to depends on the length of the
//          sum, which itself depends on that carry. The default adder run (3 layers,
//          d_model 64, 8 heads, lr 1e-3, 6000 steps) reaches 100% exact match on
//          2000 fresh samples.
//   stories (decoder-only, word level): short children's stories from the grammar of
//          train/stories.h, one story per sequence: <s> story </s>, the loss on every
//          word. A share of the sequences (kCopyShare) is instead a copying exercise:
//          <s>, a span of random words, and the same span again, the loss on every
//          word. The first span and the repeat's first word are unpredictable; the
//          loss there is lowest when the model adds nothing that depends on them, which
//          trains the induction heads to rest on <s> where nothing came before (with
//          the loss on the repeat alone they read nearby words there, and
//          TransformerLens's induction score stayed at 0.53). The stories
//          alone need copying (names, objects and places come back), but only for the
//          grammar's words in the grammar's places, and a model trained on them alone
//          copies names without an induction head (on random words repeated its best
//          head scored 0.04); the exercise shows the model exact repeats of arbitrary
//          words, so that it learns induction heads that work on any repeated sequence
//          (README, "Built-in models"). Half the sequences: at 15% (and a peak rate of
//          1e-3) the exercise was still at chance after 2,000 steps; at half (and 2e-3)
//          the induction heads formed between steps 750 and 1,250.
//
// dates and adder use a character vocabulary: ids 0, 1, 2 are <pad>, <s>, </s>, then
// one id per character. stories uses a word vocabulary (stories_vocabulary()): ids 0,
// 1, 2, 3 are <pad>, <s>, </s>, <unk>, then one id per punctuation mark or word.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ds {
class WordTokenizer;
}

namespace ds::train {

// A small deterministic generator (splitmix64); its whole state is one word, so a
// training checkpoint can store it.
struct SplitMix {
  uint64_t state = 0;
  explicit SplitMix(uint64_t seed = 0) : state(seed) {}
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform integer in [lo, hi].
  int uniform(int lo, int hi) { return lo + int(next() % uint64_t(hi - lo + 1)); }
  // Uniform double in [0, 1).
  double unit() { return double(next() >> 11) * 0x1.0p-53; }
  double normal();  // standard normal (Box-Muller)
};

enum class TaskKind { Dates, Adder, Stories };

// One sample as text: the source (encoder-decoder) or prompt (decoder-only), and the
// answer the model must write (without </s>).
struct TextSample {
  std::string input;
  std::string answer;
  int format = 0;  // dates: the DateFormat index; adder, stories: 0
};

// One training sequence as ids.
//   src:     encoder input (encoder-decoder only, no padding)
//   tokens:  decoder input (starts with <s>)
//   targets: the id expected after each decoder position, -1 where no loss is taken
struct Example {
  std::vector<int> src;
  std::vector<int> tokens;
  std::vector<int> targets;
  bool copy = false;  // a copying exercise of stories
};

class Task {
 public:
  static constexpr int kPad = 0, kBos = 1, kEos = 2;
  // stories: the positions of a sequence (<s> story </s> fits), the share of copying
  // exercises among the training sequences, and the length range of their spans.
  static constexpr int kStoryContext = 128;
  static constexpr double kCopyShare = 0.5;
  static constexpr int kCopyMin = 4, kCopyMax = (kStoryContext - 1) / 2;

  // Throws ds::Error for an unknown name ("dates", "adder", "stories").
  static Task make(std::string_view name);
  TaskKind kind() const { return kind_; }
  const std::string& name() const { return name_; }
  bool encoder_decoder() const { return kind_ == TaskKind::Dates; }
  // Every vocabulary entry in id order: "<pad>", "<s>", "</s>", then characters
  // (stories: "<unk>", then punctuation marks and words).
  const std::vector<std::string>& vocab() const { return vocab_; }
  int vocab_size() const { return int(vocab_.size()); }
  // Longest input (characters) and answer (characters) the generator produces.
  int max_input() const;
  int max_answer() const;
  // Encoder positions and decoder positions a model for this task needs.
  int max_src() const;
  int max_seq() const;
  // A human-readable note on what the model writes (stored in config.json).
  std::string answer_note() const;
  // The tokenizer block of config.json for a model of this task.
  std::string tokenizer_json() const;

  // A sample: dates and adder a prompt and its answer; stories a story (answer, with an
  // empty input).
  TextSample sample(SplitMix& rng) const;
  Example example(const TextSample& s) const;
  // A training sequence; for stories a copying exercise (kCopyShare of them) or a story.
  Example example(SplitMix& rng) const;
  // The copying exercise of stories: <s>, span, span again. Targets on the repeat from
  // its second id on; with whole, on every position (the first span's words are
  // unpredictable: training on them teaches heads with nothing to copy to leave the
  // stream alone, by resting on <s>).
  static Example copy_exercise(const std::vector<int>& span, bool whole = false);

  // Character ids of text; throws ds::Error naming the first character outside the
  // vocabulary. stories: word ids (unknown words as <unk>).
  std::vector<int> encode(std::string_view text) const;
  // The characters of ids, stopping at </s>; special ids other than </s> are skipped.
  // stories: the words with their spaces.
  std::string decode(const std::vector<int>& ids) const;
  // What the decoder is given before it writes: <s> (dates), <s> + prompt (adder,
  // stories).
  std::vector<int> prompt_ids(const std::string& input) const;

 private:
  TaskKind kind_ = TaskKind::Dates;
  std::string name_;
  std::vector<std::string> vocab_;
  int char_id_[256] = {};
  std::shared_ptr<const WordTokenizer> words_;  // stories
};

// ---- dates, exposed for the tests
int days_in_month(int year, int month);
// 0 = Monday ... 6 = Sunday.
int day_of_week(int year, int month, int day);
enum DateFormat : int {
  kDMonthY,         // 22 November 2026
  kMonthDY,         // November 22, 2026
  kMonDY,           // Nov 22, 2026
  kDMonY,           // 22 Nov 2026
  kMonDotDY,        // Nov. 22 2026
  kWeekdayDMonthY,  // Sunday, 22 November 2026
  kWkDMonY,         // Sun 22 Nov 2026
  kTheDthOfMonthY,  // the 22nd of November 2026
  kMonthDthY,       // November 22nd, 2026
  kDotted,          // 22.11.2026
  kSlashDMY,        // 22/11/2026
  kSlashYMD,        // 2026/11/22
  kDashDMY,         // 22-11-2026
  kNumDateFormats
};
const char* date_format_name(int f);
// The text of a date in a format; letter_case 0 as written, 1 lower, 2 upper;
// zero_pad: day and month numbers get a leading zero (ignored by the ordinal
// formats, which never take one).
std::string format_date(int year, int month, int day, int format, int letter_case, bool zero_pad);

}  // namespace ds::train
