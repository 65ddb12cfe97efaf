#include "train/tasks.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numbers>

#include "text/word_tokenizer.h"
#include "train/stories.h"
#include "util/error.h"

namespace ds::train {

double SplitMix::normal() {
  double u1 = unit(), u2 = unit();
  if (u1 < 1e-300) u1 = 1e-300;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

namespace {

const char* kMonths[12] = {"January", "February", "March",     "April",   "May",      "June",
                           "July",    "August",   "September", "October", "November", "December"};
const char* kWeekdays[7] = {"Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"};

std::string two(int v, bool pad) { return (pad && v < 10 ? "0" : "") + std::to_string(v); }

std::string ordinal(int d) {
  const char* suf = "th";
  if (d % 100 < 11 || d % 100 > 13) {
    if (d % 10 == 1) suf = "st";
    if (d % 10 == 2) suf = "nd";
    if (d % 10 == 3) suf = "rd";
  }
  return std::to_string(d) + suf;
}

}  // namespace

int days_in_month(int y, int m) {
  static const int d[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return m == 2 && leap ? 29 : d[m - 1];
}

int day_of_week(int y, int m, int d) {
  // Sakamoto's method: 0 = Sunday; shifted so that 0 = Monday.
  static const int t[12] = {0, 3, 2, 5, 0, 3, 5, 1, 4, 6, 2, 4};
  if (m < 3) y -= 1;
  int w = (y + y / 4 - y / 100 + y / 400 + t[m - 1] + d) % 7;
  return (w + 6) % 7;
}

const char* date_format_name(int f) {
  static const char* n[kNumDateFormats] = {"22 November 2026",    "November 22, 2026",
                                           "Nov 22, 2026",        "22 Nov 2026",
                                           "Nov. 22 2026",        "Sunday, 22 November 2026",
                                           "Sun 22 Nov 2026",     "the 22nd of November 2026",
                                           "November 22nd, 2026", "22.11.2026",
                                           "22/11/2026",          "2026/11/22",
                                           "22-11-2026"};
  return f >= 0 && f < kNumDateFormats ? n[f] : "?";
}

std::string format_date(int y, int m, int d, int f, int letter_case, bool zp) {
  const std::string month = kMonths[m - 1], mon = month.substr(0, 3);
  const std::string wday = kWeekdays[day_of_week(y, m, d)], wd = wday.substr(0, 3);
  const std::string Y = std::to_string(y), D = two(d, zp), M = two(m, zp);
  std::string s;
  switch (f) {
    case kDMonthY:
      s = D + " " + month + " " + Y;
      break;
    case kMonthDY:
      s = month + " " + D + ", " + Y;
      break;
    case kMonDY:
      s = mon + " " + D + ", " + Y;
      break;
    case kDMonY:
      s = D + " " + mon + " " + Y;
      break;
    case kMonDotDY:
      s = mon + ". " + D + " " + Y;
      break;
    case kWeekdayDMonthY:
      s = wday + ", " + D + " " + month + " " + Y;
      break;
    case kWkDMonY:
      s = wd + " " + D + " " + mon + " " + Y;
      break;
    case kTheDthOfMonthY:
      s = "the " + ordinal(d) + " of " + month + " " + Y;
      break;
    case kMonthDthY:
      s = month + " " + ordinal(d) + ", " + Y;
      break;
    case kDotted:
      s = D + "." + M + "." + Y;
      break;
    case kSlashDMY:
      s = D + "/" + M + "/" + Y;
      break;
    case kSlashYMD:
      s = Y + "/" + M + "/" + D;
      break;
    case kDashDMY:
      s = D + "-" + M + "-" + Y;
      break;
    default:
      throw Error("unknown date format " + std::to_string(f));
  }
  if (letter_case == 1)
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  if (letter_case == 2)
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::toupper(c)); });
  return s;
}

Task Task::make(std::string_view name) {
  Task t;
  std::string chars;
  if (name == "dates") {
    t.kind_ = TaskKind::Dates;
    chars = "0123456789 ,./-";
    for (char c = 'A'; c <= 'Z'; ++c) chars += c;
    for (char c = 'a'; c <= 'z'; ++c) chars += c;
  } else if (name == "adder") {
    t.kind_ = TaskKind::Adder;
    chars = "0123456789+=";
  } else if (name == "stories") {
    t.kind_ = TaskKind::Stories;
    t.name_ = "stories";
    t.vocab_ = stories_vocabulary();
    t.words_ = std::make_shared<const WordTokenizer>(t.vocab_, kBos);
    std::fill(std::begin(t.char_id_), std::end(t.char_id_), -1);
    return t;
  } else {
    throw Error("unknown task '" + std::string(name) + "' (known: dates, adder, stories)");
  }
  t.name_ = std::string(name);
  t.vocab_ = {"<pad>", "<s>", "</s>"};
  std::fill(std::begin(t.char_id_), std::end(t.char_id_), -1);
  for (char c : chars) {
    t.char_id_[static_cast<unsigned char>(c)] = int(t.vocab_.size());
    t.vocab_.push_back(std::string(1, c));
  }
  return t;
}

// dates: "Wednesday, 22 September 2026", "2026-11-22"; adder: "999+999=", "8991";
// stories: no prompt, a story of at most kStoryContext - 2 words.
int Task::max_input() const { return kind_ == TaskKind::Dates ? 28 : kind_ == TaskKind::Adder ? 8 : 0; }
int Task::max_answer() const {
  return kind_ == TaskKind::Dates ? 10 : kind_ == TaskKind::Adder ? 4 : kStoryContext - 2;
}
int Task::max_src() const { return kind_ == TaskKind::Dates ? 32 : 1; }
int Task::max_seq() const { return kind_ == TaskKind::Dates ? 12 : kind_ == TaskKind::Adder ? 16 : kStoryContext; }

std::string Task::answer_note() const {
  if (kind_ == TaskKind::Dates) return "the date as YYYY-MM-DD";
  if (kind_ == TaskKind::Stories)
    return "a short children's story from the story grammar, word by word; a share of the training sequences "
           "repeats a span of random words (a copying exercise)";
  return "the sum written reversed, least-significant digit first: 123+45= gives 861 (123 + 45 = 168)";
}

std::string Task::tokenizer_json() const {
  return nlohmann::json{{"kind", kind_ == TaskKind::Stories ? "words" : "chars"}, {"vocab", vocab_}}.dump();
}

TextSample Task::sample(SplitMix& rng) const {
  TextSample s;
  if (kind_ == TaskKind::Stories) {
    s.answer = generate_story(rng, kStoryContext).text;
  } else if (kind_ == TaskKind::Dates) {
    int y = rng.uniform(1900, 2099), m = rng.uniform(1, 12), d = rng.uniform(1, days_in_month(y, m));
    int f = rng.uniform(0, kNumDateFormats - 1);
    int lc = rng.uniform(0, 2);
    bool numeric = f >= kDotted;
    // People write 2.3.2026 as often as 02.03.2026; "02 Nov 2026" is rarer.
    bool zp = numeric ? rng.uniform(0, 1) == 1 : rng.uniform(0, 3) == 0;
    s.input = format_date(y, m, d, f, lc, zp);
    s.answer = std::to_string(y) + "-" + two(m, true) + "-" + two(d, true);
    s.format = f;
  } else {
    // Operand lengths 1, 2, 3 equally often, so short numbers are learnt too.
    auto operand = [&] {
      int len = rng.uniform(1, 3);
      return len == 1 ? rng.uniform(0, 9) : len == 2 ? rng.uniform(10, 99) : rng.uniform(100, 999);
    };
    int a = operand(), b = operand();
    s.input = std::to_string(a) + "+" + std::to_string(b) + "=";
    s.answer = std::to_string(a + b);
    std::reverse(s.answer.begin(), s.answer.end());
  }
  return s;
}

std::vector<int> Task::encode(std::string_view text) const {
  if (words_) return words_->encode(text, false);
  std::vector<int> ids;
  ids.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    int id = char_id_[static_cast<unsigned char>(text[i])];
    if (id < 0) {
      unsigned char c = static_cast<unsigned char>(text[i]);
      std::string shown = (c >= 32 && c < 127) ? "'" + std::string(1, char(c)) + "'" : "byte " + std::to_string(int(c));
      throw Error("character " + shown + " at position " + std::to_string(i + 1) + " is not in the " + name_ +
                  " vocabulary");
    }
    ids.push_back(id);
  }
  return ids;
}

std::string Task::decode(const std::vector<int>& ids) const {
  std::string s;
  if (words_) {
    int prev = -1;
    for (int id : ids) {
      if (id == kEos) break;
      if (id <= kEos || id >= vocab_size()) continue;
      s += words_->decode(prev, id);
      prev = id;
    }
    return s;
  }
  for (int id : ids) {
    if (id == kEos) break;
    if (id > kEos && id < vocab_size()) s += vocab_[size_t(id)];
  }
  return s;
}

std::vector<int> Task::prompt_ids(const std::string& input) const {
  std::vector<int> p{kBos};
  if (kind_ != TaskKind::Dates) {
    auto in = encode(input);
    p.insert(p.end(), in.begin(), in.end());
  }
  return p;
}

Example Task::copy_exercise(const std::vector<int>& span, bool whole) {
  Example e;
  e.copy = true;
  const size_t L = span.size();
  e.tokens.push_back(kBos);
  for (int r = 0; r < 2; ++r) e.tokens.insert(e.tokens.end(), span.begin(), span.end());
  e.targets.assign(e.tokens.size(), -1);
  // Position t predicts tokens[t + 1]: the repeat's ids 2..L are at L + 2 .. 2L.
  for (size_t t = whole ? 0 : L + 1; t + 1 < e.tokens.size(); ++t) e.targets[t] = e.tokens[t + 1];
  return e;
}

Example Task::example(SplitMix& rng) const {
  if (kind_ == TaskKind::Stories && rng.unit() < kCopyShare) {
    std::vector<int> span(size_t(rng.uniform(kCopyMin, kCopyMax)));
    for (int& id : span) id = rng.uniform(kEos + 2, vocab_size() - 1);  // no <pad>, <s>, </s>, <unk>
    return copy_exercise(span, true);
  }
  return example(sample(rng));
}

Example Task::example(const TextSample& s) const {
  Example e;
  if (kind_ == TaskKind::Stories) {
    e.tokens = prompt_ids(s.answer);
    e.targets.assign(e.tokens.begin() + 1, e.tokens.end());
    e.targets.push_back(kEos);
    return e;
  }
  std::vector<int> ans = encode(s.answer);
  ans.push_back(kEos);
  if (kind_ == TaskKind::Dates) e.src = encode(s.input);
  e.tokens = prompt_ids(s.input);
  const size_t n_prompt = e.tokens.size();
  e.tokens.insert(e.tokens.end(), ans.begin(), ans.end() - 1);  // the last answer id is never fed
  e.targets.assign(e.tokens.size(), -1);
  for (size_t i = 0; i < ans.size(); ++i) e.targets[n_prompt - 1 + i] = ans[i];
  return e;
}

}  // namespace ds::train
