#include "text/chat_template.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "util/error.h"
#include "util/excerpt.h"

using json = nlohmann::ordered_json;

namespace ds {

namespace {

constexpr int kMaxDepth = 64;             // nesting of statements and of expressions
constexpr int64_t kMaxSteps = 1'000'000;  // loop iterations and nodes rendered

// ------------------------------------------------------------------ values

struct Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // in insertion order

struct Value {
  enum class K { Undefined, None, Bool, Int, Float, Str, List, Dict };
  K k = K::Undefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::shared_ptr<List> list;  // shared: namespaces and lists are changed in place
  std::shared_ptr<Dict> dict;

  static Value none() { return with(K::None); }
  static Value boolean(bool v) {
    Value x = with(K::Bool);
    x.b = v;
    return x;
  }
  static Value integer(int64_t v) {
    Value x = with(K::Int);
    x.i = v;
    return x;
  }
  static Value real(double v) {
    Value x = with(K::Float);
    x.f = v;
    return x;
  }
  static Value str(std::string v) {
    Value x = with(K::Str);
    x.s = std::move(v);
    return x;
  }
  static Value of_list(List v = {}) {
    Value x = with(K::List);
    x.list = std::make_shared<List>(std::move(v));
    return x;
  }
  static Value of_dict(Dict v = {}) {
    Value x = with(K::Dict);
    x.dict = std::make_shared<Dict>(std::move(v));
    return x;
  }
  bool number() const { return k == K::Int || k == K::Float; }
  double num() const { return k == K::Int ? double(i) : f; }
  const Value* get(const std::string& key) const {
    if (k != K::Dict) return nullptr;
    for (const auto& [name, v] : *dict)
      if (name == key) return &v;
    return nullptr;
  }
  void put(const std::string& key, Value v) {
    for (auto& [name, old] : *dict)
      if (name == key) {
        old = std::move(v);
        return;
      }
    dict->emplace_back(key, std::move(v));
  }

 private:
  static Value with(K k) {
    Value x;
    x.k = k;
    return x;
  }
};

const char* type_name(const Value& v) {
  switch (v.k) {
    case Value::K::Undefined:
      return "undefined";
    case Value::K::None:
      return "none";
    case Value::K::Bool:
      return "boolean";
    case Value::K::Int:
      return "integer";
    case Value::K::Float:
      return "number";
    case Value::K::Str:
      return "string";
    case Value::K::List:
      return "list";
    case Value::K::Dict:
      return "dict";
  }
  return "?";
}

Value from_json(const json& j) {
  switch (j.type()) {
    case json::value_t::null:
      return Value::none();
    case json::value_t::boolean:
      return Value::boolean(j.get<bool>());
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return Value::integer(j.get<int64_t>());
    case json::value_t::number_float:
      return Value::real(j.get<double>());
    case json::value_t::string:
      return Value::str(j.get<std::string>());
    case json::value_t::array: {
      List l;
      for (const json& x : j) l.push_back(from_json(x));
      return Value::of_list(std::move(l));
    }
    case json::value_t::object: {
      Dict d;
      for (auto it = j.begin(); it != j.end(); ++it) d.emplace_back(it.key(), from_json(*it));
      return Value::of_dict(std::move(d));
    }
    default:
      return Value::none();
  }
}

// The characters of s (UTF-8; a byte that starts no well-formed sequence is one of its
// own): Python's strings index, slice and count characters, not bytes.
std::vector<std::string> chars_of(const std::string& s) {
  std::vector<std::string> out;
  for (size_t k = 0; k < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[k]);
    size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (k + len > s.size()) len = 1;
    for (size_t j = 1; j < len; ++j)
      if ((static_cast<unsigned char>(s[k + j]) & 0xC0) != 0x80) len = 1;
    out.push_back(s.substr(k, len));
    k += len;
  }
  return out;
}

bool truthy(const Value& v) {
  switch (v.k) {
    case Value::K::Undefined:
    case Value::K::None:
      return false;
    case Value::K::Bool:
      return v.b;
    case Value::K::Int:
      return v.i != 0;
    case Value::K::Float:
      return v.f != 0;
    case Value::K::Str:
      return !v.s.empty();
    case Value::K::List:
      return !v.list->empty();
    case Value::K::Dict:
      return !v.dict->empty();
  }
  return false;
}

std::string py_float(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  char buf[40];
  for (int prec = 1; prec <= 17; ++prec) {  // the shortest text that reads back the same (Python's repr)
    std::snprintf(buf, sizeof buf, "%.*g", prec, f);
    if (std::strtod(buf, nullptr) == f) break;
  }
  std::string s = buf;
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

std::string json_quote(const std::string& s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        o += "\\\"";
        break;
      case '\\':
        o += "\\\\";
        break;
      case '\n':
        o += "\\n";
        break;
      case '\r':
        o += "\\r";
        break;
      case '\t':
        o += "\\t";
        break;
      case '\b':
        o += "\\b";
        break;
      case '\f':
        o += "\\f";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          o += buf;
        } else {
          o += char(c);
        }
    }
  }
  return o + "\"";
}

std::string repr(const Value& v, bool top);

// Python's str() of a value, as Jinja prints it.
std::string to_str(const Value& v) { return repr(v, true); }

std::string repr(const Value& v, bool top) {
  switch (v.k) {
    case Value::K::Undefined:
      return "";
    case Value::K::None:
      return "None";
    case Value::K::Bool:
      return v.b ? "True" : "False";
    case Value::K::Int:
      return std::to_string(v.i);
    case Value::K::Float:
      return py_float(v.f);
    case Value::K::Str: {
      if (top) return v.s;
      const bool dq = v.s.find('\'') != std::string::npos && v.s.find('"') == std::string::npos;
      std::string o(1, dq ? '"' : '\'');
      for (char c : v.s) {
        if (c == '\\' || (!dq && c == '\'')) o += '\\';
        if (c == '\n') {
          o += "\\n";
          continue;
        }
        o += c;
      }
      return o + (dq ? '"' : '\'');
    }
    case Value::K::List: {
      std::string o = "[";
      for (size_t k = 0; k < v.list->size(); ++k) o += (k ? ", " : "") + repr((*v.list)[k], false);
      return o + "]";
    }
    case Value::K::Dict: {
      std::string o = "{";
      bool first = true;
      for (const auto& [key, x] : *v.dict) {
        o += (first ? "'" : ", '") + key + "': " + repr(x, false);
        first = false;
      }
      return o + "}";
    }
  }
  return "";
}

// Python's json.dumps (ensure_ascii=False, the default separators ", " and ": ").
std::string to_json(const Value& v, int indent, int depth) {
  const std::string nl = indent > 0 ? "\n" + std::string(size_t(indent * (depth + 1)), ' ') : "";
  const std::string end = indent > 0 ? "\n" + std::string(size_t(indent * depth), ' ') : "";
  const std::string sep = indent > 0 ? "," : ", ";
  switch (v.k) {
    case Value::K::Undefined:
    case Value::K::None:
      return "null";
    case Value::K::Bool:
      return v.b ? "true" : "false";
    case Value::K::Int:
      return std::to_string(v.i);
    case Value::K::Float:
      return std::isfinite(v.f) ? py_float(v.f) : (std::isnan(v.f) ? "NaN" : "Infinity");
    case Value::K::Str:
      return json_quote(v.s);
    case Value::K::List: {
      if (v.list->empty()) return "[]";
      std::string o = "[";
      for (size_t k = 0; k < v.list->size(); ++k) o += (k ? sep : "") + nl + to_json((*v.list)[k], indent, depth + 1);
      return o + end + "]";
    }
    case Value::K::Dict: {
      if (v.dict->empty()) return "{}";
      std::string o = "{";
      bool first = true;
      for (const auto& [key, x] : *v.dict) {
        o += (first ? "" : sep) + nl + json_quote(key) + ": " + to_json(x, indent, depth + 1);
        first = false;
      }
      return o + end + "}";
    }
  }
  return "null";
}

bool equal(const Value& a, const Value& b) {
  if (a.number() && b.number()) return a.num() == b.num();
  if ((a.k == Value::K::Bool && b.number()) || (b.k == Value::K::Bool && a.number()))
    return (a.k == Value::K::Bool ? double(a.b) : a.num()) == (b.k == Value::K::Bool ? double(b.b) : b.num());
  if (a.k != b.k) return false;
  switch (a.k) {
    case Value::K::Undefined:
    case Value::K::None:
      return true;
    case Value::K::Bool:
      return a.b == b.b;
    case Value::K::Str:
      return a.s == b.s;
    case Value::K::List:
      return a.list->size() == b.list->size() && std::equal(a.list->begin(), a.list->end(), b.list->begin(),
                                                            [](const Value& x, const Value& y) { return equal(x, y); });
    case Value::K::Dict: {
      if (a.dict->size() != b.dict->size()) return false;
      for (const auto& [key, x] : *a.dict) {
        const Value* y = b.get(key);
        if (!y || !equal(x, *y)) return false;
      }
      return true;
    }
    default:
      return false;
  }
}

// ------------------------------------------------------------------ the template's text

// One piece of the template: text, an {{ expression }} or a {% statement %}, with the
// line it starts on (for messages).
struct Seg {
  enum class K { Text, Expr, Stmt } k;
  std::string src;
  int line;
};

int line_at(const std::string& t, size_t pos) { return 1 + int(std::count(t.begin(), t.begin() + long(pos), '\n')); }

[[noreturn]] void fail_at(int line, const std::string& what) {
  throw Error("chat template, line " + std::to_string(line) + ": " + what);
}

// Where the tag that opens at `open` (after its two characters) closes: the index of
// `close`, skipping quoted strings; npos when it never closes.
size_t tag_end(const std::string& t, size_t from, const char* close, bool quotes) {
  char q = 0;
  for (size_t k = from; k + 1 < t.size(); ++k) {
    const char c = t[k];
    if (q) {
      if (c == '\\')
        ++k;
      else if (c == q)
        q = 0;
    } else if (quotes && (c == '\'' || c == '"')) {
      q = c;
    } else if (c == close[0] && t[k + 1] == close[1]) {
      return k;
    }
  }
  return std::string::npos;
}

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// Splits the template into text and tags, applying the whitespace rules: "-" strips all
// whitespace on its side; lstrip_blocks removes the spaces and tabs between a line's
// start and a {% or {# tag (unless "+" follows the brace); trim_blocks removes the first
// newline after a %} or #} tag (unless "+" precedes it).
std::vector<Seg> split_template(const std::string& t) {
  std::vector<Seg> out;
  size_t i = 0;
  bool strip_next = false;  // the previous tag ended with "-"
  while (i <= t.size()) {
    size_t open = t.find('{', i);
    while (open != std::string::npos && open + 1 < t.size() && t[open + 1] != '{' && t[open + 1] != '%' &&
           t[open + 1] != '#')
      open = t.find('{', open + 1);
    if (open != std::string::npos && open + 1 >= t.size()) open = std::string::npos;
    std::string text = t.substr(i, open == std::string::npos ? std::string::npos : open - i);
    if (strip_next)
      text.erase(0, std::min(text.size(), size_t(std::find_if_not(text.begin(), text.end(), is_ws) - text.begin())));
    if (open == std::string::npos) {
      if (!text.empty()) out.push_back({Seg::K::Text, text, line_at(t, i)});
      break;
    }
    const char kind = t[open + 1];
    const char mark = open + 2 < t.size() ? t[open + 2] : 0;
    if (mark == '-') {
      while (!text.empty() && is_ws(text.back())) text.pop_back();
    } else if (kind != '{' && mark != '+') {  // lstrip_blocks
      size_t p = open;
      while (p > i && (t[p - 1] == ' ' || t[p - 1] == '\t')) --p;
      if (p == 0 || t[p - 1] == '\n') text.erase(text.size() - std::min(text.size(), open - p));
    }
    if (!text.empty()) out.push_back({Seg::K::Text, text, line_at(t, i)});
    const char* close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    const size_t body = open + 2 + ((mark == '-' || mark == '+') ? 1 : 0);
    const size_t end = tag_end(t, body, close, kind != '#');
    if (end == std::string::npos)
      fail_at(line_at(t, open), std::string("a tag opened with {") + kind + " never closes");
    const bool minus = end > body && t[end - 1] == '-', plus = end > body && t[end - 1] == '+';
    const std::string src = t.substr(body, end - body - ((minus || plus) ? 1 : 0));
    if (kind != '#') out.push_back({kind == '{' ? Seg::K::Expr : Seg::K::Stmt, src, line_at(t, open)});
    i = end + 2;
    strip_next = minus;
    if (!minus && !plus && kind != '{') {  // trim_blocks
      if (i < t.size() && t[i] == '\n')
        ++i;
      else if (i + 1 < t.size() && t[i] == '\r' && t[i + 1] == '\n')
        i += 2;
    }
  }
  return out;
}

// ------------------------------------------------------------------ expressions

struct Tok {
  enum class K { Name, Int, Float, Str, Op, End } k;
  std::string text;
  int64_t i = 0;
  double f = 0;
};

std::vector<Tok> lex(const std::string& s, int line) {
  std::vector<Tok> out;
  size_t k = 0;
  while (k < s.size()) {
    const char c = s[k];
    if (is_ws(c)) {
      ++k;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t e = k;
      while (e < s.size() && (std::isalnum(static_cast<unsigned char>(s[e])) || s[e] == '_')) ++e;
      out.push_back({Tok::K::Name, s.substr(k, e - k)});
      k = e;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t e = k;
      while (e < s.size() && (std::isdigit(static_cast<unsigned char>(s[e])) || s[e] == '_')) ++e;
      const bool real = e + 1 < s.size() && s[e] == '.' && std::isdigit(static_cast<unsigned char>(s[e + 1]));
      if (real) {
        ++e;
        while (e < s.size() && std::isdigit(static_cast<unsigned char>(s[e]))) ++e;
      }
      std::string digits = s.substr(k, e - k);
      digits.erase(std::remove(digits.begin(), digits.end(), '_'), digits.end());
      Tok t{real ? Tok::K::Float : Tok::K::Int, digits};
      errno = 0;
      if (real)
        t.f = std::strtod(digits.c_str(), nullptr);
      else
        t.i = std::strtoll(digits.c_str(), nullptr, 10);
      if (errno) fail_at(line, "the number " + excerpt(digits) + " is too large");
      out.push_back(t);
      k = e;
    } else if (c == '\'' || c == '"') {
      std::string v;
      size_t e = k + 1;
      for (; e < s.size() && s[e] != c; ++e) {
        if (s[e] != '\\' || e + 1 >= s.size()) {
          v += s[e];
          continue;
        }
        const char x = s[++e];
        switch (x) {
          case 'n':
            v += '\n';
            break;
          case 't':
            v += '\t';
            break;
          case 'r':
            v += '\r';
            break;
          case '\\':
            v += '\\';
            break;
          case '\'':
            v += '\'';
            break;
          case '"':
            v += '"';
            break;
          case '\n':
            break;
          default:
            v += '\\', v += x;
        }
      }
      if (e >= s.size()) fail_at(line, "a string never closes");
      out.push_back({Tok::K::Str, v});
      k = e + 1;
    } else {
      static const char* const ops[] = {"//", "**", "==", "!=", "<=", ">=", "(", ")", "[", "]", "{", "}", ".",
                                        ",",  ":",  "|",  "~",  "+",  "-",  "*", "/", "%", "<", ">", "="};
      bool found = false;
      for (const char* op : ops) {
        const size_t n = std::char_traits<char>::length(op);
        if (s.compare(k, n, op) == 0) {
          out.push_back({Tok::K::Op, op});
          k += n;
          found = true;
          break;
        }
      }
      if (!found) fail_at(line, "unexpected character " + excerpt(std::string(1, c)));
    }
  }
  out.push_back({Tok::K::End, ""});
  return out;
}

struct Expr;
using ExprP = std::shared_ptr<const Expr>;
struct Expr {
  enum class K { Lit, Name, Attr, Index, Slice, Call, Filter, Test, Not, Neg, Bin, And, Or, Cond, List, Dict } k;
  Value lit;
  std::string name;                               // Name, Attr, Filter, Test, Bin's operator
  std::vector<ExprP> a;                           // operands; Call: callee then arguments
  std::vector<std::pair<std::string, ExprP>> kw;  // keyword arguments
  bool negate = false;                            // Test: "is not"
};

class ExprParser {
 public:
  ExprParser(std::vector<Tok> toks, int line) : t_(std::move(toks)), line_(line) {}

  ExprP parse_all() {
    ExprP e = expression(true);
    expect_end();
    return e;
  }
  ExprP expression(bool condexpr) {
    ExprP e = or_expr();
    if (condexpr && word("if")) {
      ExprP cond = or_expr();
      ExprP other = word("else") ? expression(true) : lit(Value());
      return node(Expr::K::Cond, {cond, e, other});
    }
    return e;
  }
  bool word(const char* w) {
    if (t_[p_].k == Tok::K::Name && t_[p_].text == w) return ++p_, true;
    return false;
  }
  bool op(const char* o) {
    if (t_[p_].k == Tok::K::Op && t_[p_].text == o) return ++p_, true;
    return false;
  }
  void need(const char* o) {
    if (!op(o)) fail("expected '" + std::string(o) + "'");
  }
  std::string name() {
    if (t_[p_].k != Tok::K::Name) fail("expected a name");
    return t_[p_++].text;
  }
  bool at_end() const { return t_[p_].k == Tok::K::End; }
  void expect_end() {
    if (!at_end()) fail("unexpected " + excerpt(t_[p_].text));
  }
  [[noreturn]] void fail(const std::string& what) const { fail_at(line_, what); }

 private:
  struct Depth {
    explicit Depth(ExprParser& p) : p_(p) {
      if (++p_.depth_ > kMaxDepth) p_.fail("expression nested too deeply");
    }
    ~Depth() { --p_.depth_; }
    ExprParser& p_;
  };

  static ExprP node(Expr::K k, std::vector<ExprP> a, std::string name = "") {
    auto e = std::make_shared<Expr>();
    e->k = k;
    e->a = std::move(a);
    e->name = std::move(name);
    return e;
  }
  static ExprP lit(Value v) {
    auto e = std::make_shared<Expr>();
    e->k = Expr::K::Lit;
    e->lit = std::move(v);
    return e;
  }

  ExprP or_expr() {
    ExprP e = and_expr();
    while (word("or")) e = node(Expr::K::Or, {e, and_expr()});
    return e;
  }
  ExprP and_expr() {
    ExprP e = not_expr();
    while (word("and")) e = node(Expr::K::And, {e, not_expr()});
    return e;
  }
  ExprP not_expr() {
    Depth d(*this);
    if (word("not")) return node(Expr::K::Not, {not_expr()});
    return compare();
  }
  ExprP compare() {
    ExprP e = math1();
    for (;;) {
      std::string o;
      for (const char* c : {"==", "!=", "<=", ">=", "<", ">"})
        if (op(c)) {
          o = c;
          break;
        }
      if (o.empty() && word("in")) o = "in";
      if (o.empty() && t_[p_].k == Tok::K::Name && t_[p_].text == "not" && t_[p_ + 1].k == Tok::K::Name &&
          t_[p_ + 1].text == "in") {
        p_ += 2;
        o = "not in";
      }
      if (o.empty()) return e;
      e = node(Expr::K::Bin, {e, math1()}, o);
    }
  }
  ExprP math1() {
    ExprP e = concat();
    for (;;) {
      if (op("+"))
        e = node(Expr::K::Bin, {e, concat()}, "+");
      else if (op("-"))
        e = node(Expr::K::Bin, {e, concat()}, "-");
      else
        return e;
    }
  }
  ExprP concat() {
    ExprP e = math2();
    while (op("~")) e = node(Expr::K::Bin, {e, math2()}, "~");
    return e;
  }
  ExprP math2() {
    ExprP e = power();
    for (;;) {
      std::string o;
      for (const char* c : {"//", "*", "/", "%"})
        if (op(c)) {
          o = c;
          break;
        }
      if (o.empty()) return e;
      e = node(Expr::K::Bin, {e, power()}, o);
    }
  }
  ExprP power() {
    ExprP e = unary();
    while (op("**")) e = node(Expr::K::Bin, {e, unary()}, "**");
    return e;
  }
  ExprP unary() {
    Depth d(*this);
    if (op("-")) return postfix_filters(node(Expr::K::Neg, {unary_no_filter()}));
    if (op("+")) return unary();
    return postfix_filters(postfix(primary()));
  }
  ExprP unary_no_filter() {
    Depth d(*this);
    if (op("-")) return node(Expr::K::Neg, {unary_no_filter()});
    return postfix(primary());
  }
  ExprP primary() {
    Depth d(*this);
    const Tok t = t_[p_];
    switch (t.k) {
      case Tok::K::Str: {
        ++p_;
        std::string s = t.text;
        while (t_[p_].k == Tok::K::Str) s += t_[p_++].text;  // adjacent strings join
        return lit(Value::str(s));
      }
      case Tok::K::Int:
        ++p_;
        return lit(Value::integer(t.i));
      case Tok::K::Float:
        ++p_;
        return lit(Value::real(t.f));
      case Tok::K::Name: {
        ++p_;
        if (t.text == "true" || t.text == "True") return lit(Value::boolean(true));
        if (t.text == "false" || t.text == "False") return lit(Value::boolean(false));
        if (t.text == "none" || t.text == "None") return lit(Value::none());
        auto e = std::make_shared<Expr>();
        e->k = Expr::K::Name;
        e->name = t.text;
        return e;
      }
      case Tok::K::Op:
        if (op("(")) {
          ExprP e = expression(true);
          if (op(",")) {  // a tuple: a list here
            std::vector<ExprP> items = {e};
            while (!op(")")) {
              items.push_back(expression(true));
              if (!op(",")) {
                need(")");
                break;
              }
            }
            return node(Expr::K::List, items);
          }
          need(")");
          return e;
        }
        if (op("[")) {
          std::vector<ExprP> items;
          while (!op("]")) {
            items.push_back(expression(true));
            if (!op(",")) {
              need("]");
              break;
            }
          }
          return node(Expr::K::List, items);
        }
        if (op("{")) {
          std::vector<ExprP> items;  // key, value, key, value...
          while (!op("}")) {
            items.push_back(expression(true));
            need(":");
            items.push_back(expression(true));
            if (!op(",")) {
              need("}");
              break;
            }
          }
          return node(Expr::K::Dict, items);
        }
        break;
      case Tok::K::End:
        fail("the expression ends too soon");
    }
    fail("unexpected " + excerpt(t.text));
  }
  ExprP postfix(ExprP e) {
    for (;;) {
      if (op(".")) {
        e = node(Expr::K::Attr, {e}, t_[p_].k == Tok::K::Int ? std::to_string(t_[p_++].i) : name());
      } else if (op("[")) {
        e = subscript(e);
      } else if (t_[p_].k == Tok::K::Op && t_[p_].text == "(") {
        e = call(e);
      } else {
        return e;
      }
    }
  }
  ExprP subscript(ExprP e) {
    ExprP parts[3];
    bool slice = false;
    for (int k = 0; k < 3; ++k) {
      if (!(t_[p_].k == Tok::K::Op && (t_[p_].text == ":" || t_[p_].text == "]"))) parts[k] = expression(true);
      if (k < 2 && op(":")) {
        slice = true;
        continue;
      }
      break;
    }
    need("]");
    if (!slice) return node(Expr::K::Index, {e, parts[0]});
    return node(Expr::K::Slice, {e, parts[0] ? parts[0] : lit(Value::none()), parts[1] ? parts[1] : lit(Value::none()),
                                 parts[2] ? parts[2] : lit(Value::none())});
  }
  // Arguments in parentheses: positional into a, keywords into kw.
  void arguments(Expr& e) {
    need("(");
    while (!op(")")) {
      if (t_[p_].k == Tok::K::Name && t_[p_ + 1].k == Tok::K::Op && t_[p_ + 1].text == "=") {
        std::string key = t_[p_].text;
        p_ += 2;
        e.kw.emplace_back(key, expression(true));
      } else {
        e.a.push_back(expression(true));
      }
      if (!op(",")) {
        need(")");
        break;
      }
    }
  }
  ExprP call(ExprP callee) {
    auto e = std::make_shared<Expr>();
    e->k = Expr::K::Call;
    e->a.push_back(callee);
    arguments(*e);
    return e;
  }
  ExprP postfix_filters(ExprP e) {
    for (;;) {
      if (op("|")) {
        auto f = std::make_shared<Expr>();
        f->k = Expr::K::Filter;
        f->name = name();
        f->a.push_back(e);
        if (t_[p_].k == Tok::K::Op && t_[p_].text == "(") arguments(*f);
        e = f;
      } else if (word("is")) {
        auto f = std::make_shared<Expr>();
        f->k = Expr::K::Test;
        f->negate = word("not");
        f->name = t_[p_].k == Tok::K::Op && (t_[p_].text == "==" || t_[p_].text == "!=") ? t_[p_++].text : name();
        f->a.push_back(e);
        if (t_[p_].k == Tok::K::Op && t_[p_].text == "(") {
          arguments(*f);
        } else if (t_[p_].k != Tok::K::End && t_[p_].k != Tok::K::Op && !(t_[p_].k == Tok::K::Name && is_keyword())) {
          f->a.push_back(unary_no_filter());  // "is divisibleby 3", "is equalto 'x'"
        }
        e = f;
      } else {
        return e;
      }
    }
  }
  bool is_keyword() const {
    const std::string& w = t_[p_].text;
    return w == "and" || w == "or" || w == "if" || w == "else" || w == "not" || w == "in" || w == "is";
  }

  std::vector<Tok> t_;
  size_t p_ = 0;
  int line_;
  int depth_ = 0;
};

// ------------------------------------------------------------------ statements

struct Node {
  enum class K { Text, Out, If, For, Set, SetBlock, Break, Continue } k;
  std::string text;  // Text
  int line = 0;
  ExprP e;  // Out; Set's value; For's iterable
  std::vector<std::pair<ExprP, std::vector<Node>>>
      branches;                      // If: (condition, body)...; For: the body, with no condition
  std::vector<Node> other;           // If's else; For's else
  std::vector<std::string> targets;  // For: loop variables; Set: the name
  std::string attr;                  // Set: ns.attr
  ExprP cond;                        // For's "if" filter
};

Node make_node(Node::K k, int line, std::string text = "") {
  Node n;
  n.k = k;
  n.line = line;
  n.text = std::move(text);
  return n;
}

class StmtParser {
 public:
  explicit StmtParser(std::vector<Seg> segs) : s_(std::move(segs)) {}

  std::vector<Node> parse() {
    std::vector<Node> body = block({});
    if (p_ < s_.size()) fail_at(s_[p_].line, "unexpected {% " + excerpt(first_word(s_[p_].src)) + " %}");
    return body;
  }

 private:
  static std::string first_word(const std::string& src) {
    size_t a = 0;
    while (a < src.size() && is_ws(src[a])) ++a;
    size_t b = a;
    while (b < src.size() && (std::isalnum(static_cast<unsigned char>(src[b])) || src[b] == '_')) ++b;
    return src.substr(a, b - a);
  }

  // Nodes until a {% statement %} whose first word is in `stops` (left unread) or the end.
  std::vector<Node> block(const std::vector<std::string>& stops) {
    if (++depth_ > kMaxDepth) fail_at(p_ < s_.size() ? s_[p_].line : 0, "statements nested too deeply");
    std::vector<Node> out;
    while (p_ < s_.size()) {
      const Seg& g = s_[p_];
      if (g.k == Seg::K::Text) {
        out.push_back(make_node(Node::K::Text, g.line, g.src));
        ++p_;
      } else if (g.k == Seg::K::Expr) {
        Node n = make_node(Node::K::Out, g.line);
        n.e = ExprParser(lex(g.src, g.line), g.line).parse_all();
        out.push_back(std::move(n));
        ++p_;
      } else {
        const std::string w = first_word(g.src);
        if (std::find(stops.begin(), stops.end(), w) != stops.end()) break;
        statement(w, out);
      }
    }
    --depth_;
    return out;
  }

  void statement(const std::string& w, std::vector<Node>& out) {
    const Seg g = s_[p_++];
    ExprParser ep(lex(g.src, g.line), g.line);
    ep.name();  // the keyword
    if (w == "if") {
      out.push_back(if_node(ep, g.line));
    } else if (w == "for") {
      out.push_back(for_node(ep, g.line));
    } else if (w == "set") {
      out.push_back(set_node(ep, g.line));
    } else if (w == "break" || w == "continue") {
      ep.expect_end();
      out.push_back(make_node(w == "break" ? Node::K::Break : Node::K::Continue, g.line));
    } else if (w == "generation") {
      ep.expect_end();
      std::vector<Node> body = block({"endgeneration"});
      close("endgeneration", g.line);
      for (Node& n : body) out.push_back(std::move(n));
    } else {
      fail_at(g.line, "{% " + excerpt(w) + " %} is not supported by decoderscope's template interpreter");
    }
  }

  void close(const char* word, int line) {
    if (p_ >= s_.size()) fail_at(line, std::string("missing {% ") + word + " %}");
    ExprParser ep(lex(s_[p_].src, s_[p_].line), s_[p_].line);
    ep.name();
    ep.expect_end();
    ++p_;
  }

  Node if_node(ExprParser& ep, int line) {
    Node n = make_node(Node::K::If, line);
    ExprP cond = ep.expression(true);
    ep.expect_end();
    for (;;) {
      std::vector<Node> body = block({"elif", "else", "endif"});
      n.branches.emplace_back(cond, std::move(body));
      if (p_ >= s_.size()) fail_at(line, "missing {% endif %}");
      const Seg& g = s_[p_];
      const std::string w = first_word(g.src);
      ExprParser next(lex(g.src, g.line), g.line);
      next.name();
      ++p_;
      if (w == "elif") {
        cond = next.expression(true);
        next.expect_end();
        continue;
      }
      next.expect_end();
      if (w == "else") {
        n.other = block({"endif"});
        close("endif", line);
      }
      return n;
    }
  }

  Node for_node(ExprParser& ep, int line) {
    Node n = make_node(Node::K::For, line);
    n.targets.push_back(ep.name());
    while (ep.op(",")) n.targets.push_back(ep.name());
    if (!ep.word("in")) ep.fail("expected 'in' in the for statement");
    n.e = ep.expression(false);
    if (ep.word("if")) n.cond = ep.expression(false);
    if (ep.word("recursive")) ep.fail("recursive loops are not supported");
    ep.expect_end();
    n.branches.emplace_back(nullptr, block({"else", "endfor"}));
    if (p_ < s_.size() && first_word(s_[p_].src) == "else") {
      ++p_;
      n.other = block({"endfor"});
    }
    close("endfor", line);
    return n;
  }

  Node set_node(ExprParser& ep, int line) {
    Node n = make_node(Node::K::Set, line);
    n.targets.push_back(ep.name());
    if (ep.op(".")) n.attr = ep.name();
    if (ep.at_end()) {  // {% set x %}...{% endset %}
      if (!n.attr.empty()) ep.fail("a block set cannot assign an attribute");
      n.k = Node::K::SetBlock;
      n.branches.emplace_back(nullptr, block({"endset"}));
      close("endset", line);
      return n;
    }
    while (ep.op(",")) n.targets.push_back(ep.name());
    ep.need("=");
    n.e = ep.expression(true);
    ep.expect_end();
    return n;
  }

  std::vector<Seg> s_;
  size_t p_ = 0;
  int depth_ = 0;
};

// ------------------------------------------------------------------ rendering

struct LoopSignal {
  bool brk;
};

class Renderer {
 public:
  explicit Renderer(Value globals) { scopes_.push_back(std::move(globals)); }

  void render(const std::vector<Node>& nodes, std::string& out) {
    for (const Node& n : nodes) {
      step(n.line);
      switch (n.k) {
        case Node::K::Text:
          emit(out, n.text);
          break;
        case Node::K::Out:
          emit(out, to_str(eval(*n.e)));
          break;
        case Node::K::If:
          render_if(n, out);
          break;
        case Node::K::For:
          render_for(n, out);
          break;
        case Node::K::Set:
          assign(n, eval(*n.e));
          break;
        case Node::K::SetBlock: {
          std::string text;
          render(n.branches.front().second, text);
          assign(n, Value::str(text));
          break;
        }
        case Node::K::Break:
        case Node::K::Continue:
          if (loops_ == 0) fail_at(n.line, "break or continue outside a loop");
          throw LoopSignal{n.k == Node::K::Break};
      }
    }
  }

 private:
  void step(int line) {
    line_ = line;
    if (++steps_ > kMaxSteps) fail("the template runs too long (more than a million steps)");
  }
  [[noreturn]] void fail(const std::string& what) const { fail_at(line_, what); }
  void emit(std::string& out, const std::string& s) {
    if (out.size() + s.size() > kMaxChatOutput) fail("the template makes more than 16 MB of text");
    out += s;
  }

  void render_if(const Node& n, std::string& out) {
    for (const auto& [cond, body] : n.branches)
      if (truthy(eval(*cond))) return render(body, out);
    render(n.other, out);
  }

  List items_of(const Value& v) {
    switch (v.k) {
      case Value::K::List:
        return *v.list;
      case Value::K::Dict: {
        List keys;
        for (const auto& [key, x] : *v.dict) keys.push_back(Value::str(key));
        return keys;
      }
      case Value::K::Str: {
        List chars;
        for (std::string& ch : chars_of(v.s)) chars.push_back(Value::str(std::move(ch)));
        return chars;
      }
      case Value::K::Undefined:
        return {};
      default:
        fail(std::string("cannot loop over a ") + type_name(v));
    }
  }

  void bind_targets(const Node& n, Value& scope, const Value& item) {
    if (n.targets.size() == 1) return scope.put(n.targets[0], item);
    if (item.k != Value::K::List || item.list->size() != n.targets.size())
      fail("cannot unpack a " + std::string(type_name(item)) + " into " + std::to_string(n.targets.size()) + " names");
    for (size_t k = 0; k < n.targets.size(); ++k) scope.put(n.targets[k], (*item.list)[k]);
  }

  void render_for(const Node& n, std::string& out) {
    List items = items_of(eval(*n.e));
    if (n.cond) {  // the "if" filter sees each item bound
      List kept;
      for (const Value& it : items) {
        scopes_.push_back(Value::of_dict());
        bind_targets(n, scopes_.back(), it);
        const bool keep = truthy(eval(*n.cond));
        scopes_.pop_back();
        if (keep) kept.push_back(it);
      }
      items = std::move(kept);
    }
    if (items.empty()) return render(n.other, out);
    ++loops_;
    const int64_t len = int64_t(items.size());
    for (int64_t k = 0; k < len; ++k) {
      step(n.line);
      Value scope = Value::of_dict();
      bind_targets(n, scope, items[size_t(k)]);
      Value loop = Value::of_dict({{"index0", Value::integer(k)},
                                   {"index", Value::integer(k + 1)},
                                   {"revindex0", Value::integer(len - k - 1)},
                                   {"revindex", Value::integer(len - k)},
                                   {"first", Value::boolean(k == 0)},
                                   {"last", Value::boolean(k == len - 1)},
                                   {"length", Value::integer(len)}});
      if (k > 0) loop.put("previtem", items[size_t(k - 1)]);
      if (k + 1 < len) loop.put("nextitem", items[size_t(k + 1)]);
      scope.put("loop", loop);
      scopes_.push_back(std::move(scope));
      bool stop = false;
      try {
        render(n.branches.front().second, out);
      } catch (const LoopSignal& s) {
        stop = s.brk;
      }
      scopes_.pop_back();
      if (stop) break;
    }
    --loops_;
  }

  void assign(const Node& n, Value v) {
    if (!n.attr.empty()) {
      Value target = lookup(n.targets[0]);
      if (target.k != Value::K::Dict) fail("cannot set an attribute of " + n.targets[0] + ", a " + type_name(target));
      target.put(n.attr, std::move(v));  // shared: changes the namespace itself
      return;
    }
    if (n.targets.size() == 1) return scopes_.back().put(n.targets[0], std::move(v));
    if (v.k != Value::K::List || v.list->size() != n.targets.size()) fail("cannot unpack the value of this set");
    for (size_t k = 0; k < n.targets.size(); ++k) scopes_.back().put(n.targets[k], (*v.list)[k]);
  }

  Value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it)
      if (const Value* v = it->get(name)) return *v;
    return Value();
  }

  // ---- expressions

  Value eval(const Expr& e) {
    switch (e.k) {
      case Expr::K::Lit:
        return e.lit;
      case Expr::K::Name:
        return lookup(e.name);
      case Expr::K::Attr:
        return attribute(eval(*e.a[0]), e.name);
      case Expr::K::Index:
        return index(eval(*e.a[0]), eval(*e.a[1]));
      case Expr::K::Slice:
        return slice(eval(*e.a[0]), eval(*e.a[1]), eval(*e.a[2]), eval(*e.a[3]));
      case Expr::K::Call:
        return call(e);
      case Expr::K::Filter:
        return filter(e);
      case Expr::K::Test:
        return Value::boolean(test(e) != e.negate);
      case Expr::K::Not:
        return Value::boolean(!truthy(eval(*e.a[0])));
      case Expr::K::Neg: {
        const Value v = eval(*e.a[0]);
        if (v.k == Value::K::Int) return Value::integer(-v.i);
        if (v.k == Value::K::Float) return Value::real(-v.f);
        fail(std::string("cannot negate a ") + type_name(v));
      }
      case Expr::K::And: {
        Value a = eval(*e.a[0]);
        return truthy(a) ? eval(*e.a[1]) : a;
      }
      case Expr::K::Or: {
        Value a = eval(*e.a[0]);
        return truthy(a) ? a : eval(*e.a[1]);
      }
      case Expr::K::Cond:
        return truthy(eval(*e.a[0])) ? eval(*e.a[1]) : eval(*e.a[2]);
      case Expr::K::List: {
        List l;
        for (const ExprP& x : e.a) l.push_back(eval(*x));
        return Value::of_list(std::move(l));
      }
      case Expr::K::Dict: {
        Value d = Value::of_dict();
        for (size_t k = 0; k + 1 < e.a.size(); k += 2) {
          const Value key = eval(*e.a[k]);
          if (key.k != Value::K::Str) fail("a dict key must be a string");
          d.put(key.s, eval(*e.a[k + 1]));
        }
        return d;
      }
      case Expr::K::Bin:
        return binary(e.name, eval(*e.a[0]), eval(*e.a[1]));
    }
    return Value();
  }

  Value attribute(const Value& v, const std::string& name) {
    if (v.k == Value::K::Dict) {
      const Value* x = v.get(name);
      return x ? *x : Value();
    }
    if (v.k == Value::K::List && !name.empty() && std::isdigit(static_cast<unsigned char>(name[0])))
      return index(v, Value::integer(std::stoll(name)));
    return Value();  // methods are looked up by call(); anything else is undefined
  }

  Value index(const Value& v, const Value& key) {
    if (v.k == Value::K::Dict) {
      if (key.k != Value::K::Str) return Value();
      const Value* x = v.get(key.s);
      return x ? *x : Value();
    }
    if (v.k == Value::K::Str && key.k == Value::K::Int) return index(Value::of_list(items_of(v)), key);
    if (v.k == Value::K::List && key.k == Value::K::Int) {
      const int64_t n = int64_t(v.list->size());
      const int64_t k = key.i < 0 ? key.i + n : key.i;
      if (k < 0 || k >= n) return Value();
      return (*v.list)[size_t(k)];
    }
    if (v.k == Value::K::Undefined) fail("cannot take an item of an undefined value");
    return Value();
  }

  Value slice(const Value& v, const Value& a, const Value& b, const Value& c) {
    if (v.k == Value::K::Str) {  // by characters
      const Value chars = slice(Value::of_list(items_of(v)), a, b, c);
      std::string s;
      for (const Value& ch : *chars.list) s += ch.s;
      return Value::str(s);
    }
    if (v.k != Value::K::List) fail(std::string("cannot slice a ") + type_name(v));
    const int64_t n = int64_t(v.list->size());
    const int64_t st = c.k == Value::K::Int ? c.i : 1;
    if (st == 0) fail("a slice step cannot be zero");
    auto clamp = [&](const Value& x, int64_t dflt) {
      if (x.k != Value::K::Int) return dflt;
      int64_t k = x.i < 0 ? x.i + n : x.i;
      return st > 0 ? std::clamp<int64_t>(k, 0, n) : std::clamp<int64_t>(k, -1, n - 1);
    };
    const int64_t from = clamp(a, st > 0 ? 0 : n - 1), to = clamp(b, st > 0 ? n : -1);
    List l;
    for (int64_t k = from; st > 0 ? k < to : k > to; k += st) l.push_back((*v.list)[size_t(k)]);
    return Value::of_list(std::move(l));
  }

  Value binary(const std::string& o, const Value& a, const Value& b) {
    if (o == "==") return Value::boolean(equal(a, b));
    if (o == "!=") return Value::boolean(!equal(a, b));
    if (o == "in" || o == "not in") return Value::boolean(contains(b, a) == (o == "in"));
    if (o == "~") return Value::str(to_str(a) + to_str(b));
    if (o == "+") {
      if (a.k == Value::K::Str && b.k == Value::K::Str) return Value::str(a.s + b.s);
      if (a.k == Value::K::List && b.k == Value::K::List) {
        List l = *a.list;
        l.insert(l.end(), b.list->begin(), b.list->end());
        return Value::of_list(std::move(l));
      }
    }
    if (o == "<" || o == ">" || o == "<=" || o == ">=") return Value::boolean(order(o, a, b));
    if (a.number() && b.number()) return arithmetic(o, a, b);
    if (o == "*" &&
        ((a.k == Value::K::Str && b.k == Value::K::Int) || (a.k == Value::K::Int && b.k == Value::K::Str))) {
      const Value& s = a.k == Value::K::Str ? a : b;
      const int64_t n = a.k == Value::K::Int ? a.i : b.i;
      if (n > 0 && double(n) * double(s.s.size()) > double(kMaxChatOutput)) fail("a string repeated beyond 16 MB");
      std::string r;
      for (int64_t k = 0; k < n; ++k) r += s.s;
      return Value::str(r);
    }
    fail("cannot apply '" + o + "' to a " + type_name(a) + " and a " + type_name(b));
  }

  bool order(const std::string& o, const Value& a, const Value& b) {
    int c;
    if (a.number() && b.number())
      c = a.num() < b.num() ? -1 : a.num() > b.num() ? 1 : 0;
    else if (a.k == Value::K::Str && b.k == Value::K::Str)
      c = a.s.compare(b.s);
    else
      fail("cannot compare a " + std::string(type_name(a)) + " and a " + type_name(b));
    return o == "<" ? c < 0 : o == ">" ? c > 0 : o == "<=" ? c <= 0 : c >= 0;
  }

  Value arithmetic(const std::string& o, const Value& a, const Value& b) {
    const bool ints = a.k == Value::K::Int && b.k == Value::K::Int;
    if (o == "+") return ints ? Value::integer(a.i + b.i) : Value::real(a.num() + b.num());
    if (o == "-") return ints ? Value::integer(a.i - b.i) : Value::real(a.num() - b.num());
    if (o == "*") return ints ? Value::integer(a.i * b.i) : Value::real(a.num() * b.num());
    if (o == "**")
      return ints && b.i >= 0 && b.i < 63 ? Value::integer(int64_t(std::pow(a.i, b.i)))
                                          : Value::real(std::pow(a.num(), b.num()));
    if (b.num() == 0) fail("division by zero");
    if (o == "/") return Value::real(a.num() / b.num());
    if (o == "//") return ints ? Value::integer(floor_div(a.i, b.i)) : Value::real(std::floor(a.num() / b.num()));
    if (o == "%") {
      if (ints) return Value::integer(a.i - floor_div(a.i, b.i) * b.i);
      return Value::real(a.num() - std::floor(a.num() / b.num()) * b.num());
    }
    fail("unknown operator " + o);
  }
  static int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
    return q;
  }

  bool contains(const Value& hay, const Value& needle) {
    switch (hay.k) {
      case Value::K::Str:
        if (needle.k != Value::K::Str) fail("'in <string>' needs a string on the left");
        return hay.s.find(needle.s) != std::string::npos;
      case Value::K::List:
        return std::any_of(hay.list->begin(), hay.list->end(), [&](const Value& x) { return equal(x, needle); });
      case Value::K::Dict:
        return needle.k == Value::K::Str && hay.get(needle.s) != nullptr;
      case Value::K::Undefined:
        return false;
      default:
        fail(std::string("cannot look for something in a ") + type_name(hay));
    }
  }

  // ---- calls: functions and methods

  std::vector<Value> args_of(const Expr& e, size_t from) {
    std::vector<Value> v;
    for (size_t k = from; k < e.a.size(); ++k) v.push_back(eval(*e.a[k]));
    return v;
  }

  Value call(const Expr& e) {
    const Expr& callee = *e.a[0];
    if (callee.k == Expr::K::Attr) return method(eval(*callee.a[0]), callee.name, args_of(e, 1));
    if (callee.k != Expr::K::Name) fail("only functions and methods can be called");
    const std::vector<Value> args = args_of(e, 1);
    if (callee.name == "namespace") {
      Value ns = Value::of_dict();
      for (const auto& [key, x] : e.kw) ns.put(key, eval(*x));
      if (!args.empty() && args[0].k == Value::K::Dict)
        for (const auto& [key, x] : *args[0].dict) ns.put(key, x);
      return ns;
    }
    if (callee.name == "range") return range(args);
    if (callee.name == "raise_exception")
      throw Error("the chat template refuses these messages: " + (args.empty() ? std::string() : to_str(args[0])));
    if (callee.name == "strftime_now") {
      if (args.empty() || args[0].k != Value::K::Str) fail("strftime_now needs a format string");
      const std::time_t now = std::time(nullptr);
      std::tm tm{};
      localtime_r(&now, &tm);
      char buf[256];
      const size_t n = std::strftime(buf, sizeof buf, args[0].s.c_str(), &tm);
      return Value::str(std::string(buf, n));
    }
    const Value f = lookup(callee.name);
    fail("the function " + excerpt(callee.name) +
         (f.k == Value::K::Undefined ? " is not defined" : " cannot be called"));
  }

  Value range(const std::vector<Value>& args) {
    for (const Value& a : args)
      if (a.k != Value::K::Int) fail("range() takes integers");
    int64_t from = 0, to = 0, st = 1;
    if (args.size() == 1)
      to = args[0].i;
    else if (args.size() >= 2)
      from = args[0].i, to = args[1].i;
    if (args.size() == 3) st = args[2].i;
    if (st == 0 || args.empty() || args.size() > 3) fail("range() takes 1 to 3 integers, the step not zero");
    List l;
    for (int64_t k = from; st > 0 ? k < to : k > to; k += st) {
      if (l.size() >= 1'000'000) fail("range() of more than a million numbers");
      l.push_back(Value::integer(k));
    }
    return Value::of_list(std::move(l));
  }

  static std::string strip_chars(const std::string& s, const std::string& chars, bool left, bool right) {
    auto in = [&](char c) { return chars.empty() ? is_ws(c) : chars.find(c) != std::string::npos; };
    size_t a = 0, b = s.size();
    while (left && a < b && in(s[a])) ++a;
    while (right && b > a && in(s[b - 1])) --b;
    return s.substr(a, b - a);
  }

  Value split(const std::string& s, const std::vector<Value>& args) {
    List out;
    const int64_t maxsplit = args.size() > 1 && args[1].k == Value::K::Int ? args[1].i : -1;
    if (args.empty() || args[0].k == Value::K::None) {  // runs of whitespace
      size_t k = 0;
      while (k < s.size()) {
        while (k < s.size() && is_ws(s[k])) ++k;
        if (k >= s.size()) break;
        if (maxsplit >= 0 && int64_t(out.size()) == maxsplit) {
          out.push_back(Value::str(strip_chars(s.substr(k), "", false, true)));
          break;
        }
        size_t e = k;
        while (e < s.size() && !is_ws(s[e])) ++e;
        out.push_back(Value::str(s.substr(k, e - k)));
        k = e;
      }
      return Value::of_list(std::move(out));
    }
    if (args[0].k != Value::K::Str || args[0].s.empty()) fail("split() needs a non-empty separator");
    const std::string& sep = args[0].s;
    size_t k = 0;
    for (;;) {
      const size_t at = s.find(sep, k);
      if (at == std::string::npos || (maxsplit >= 0 && int64_t(out.size()) == maxsplit)) break;
      out.push_back(Value::str(s.substr(k, at - k)));
      k = at + sep.size();
    }
    out.push_back(Value::str(s.substr(k)));
    return Value::of_list(std::move(out));
  }

  static std::string title(const std::string& s) {
    std::string o = s;
    bool start = true;
    for (char& c : o) {
      const bool alpha = std::isalpha(static_cast<unsigned char>(c));
      if (alpha)
        c = char(start ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c)));
      start = !alpha;
    }
    return o;
  }
  static std::string cased(std::string s, bool upper) {
    for (char& c : s)
      c = char(upper ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c)));
    return s;
  }
  static std::string replace_all(const std::string& s, const std::string& from, const std::string& to) {
    if (from.empty()) return s;
    std::string o;
    size_t k = 0;
    for (size_t at; (at = s.find(from, k)) != std::string::npos; k = at + from.size()) o += s.substr(k, at - k) + to;
    return o + s.substr(k);
  }

  std::string str_arg(const std::vector<Value>& args, size_t k, const std::string& what) {
    if (args.size() <= k || args[k].k != Value::K::Str) fail(what + " needs a string argument");
    return args[k].s;
  }

  Value method(const Value& v, const std::string& m, const std::vector<Value>& args) {
    if (v.k == Value::K::Str) return string_method(v.s, m, args);
    if (v.k == Value::K::Dict) {
      if (m == "items") {
        List l;
        for (const auto& [key, x] : *v.dict) l.push_back(Value::of_list({Value::str(key), x}));
        return Value::of_list(std::move(l));
      }
      if (m == "keys" || m == "values") {
        List l;
        for (const auto& [key, x] : *v.dict) l.push_back(m == "keys" ? Value::str(key) : x);
        return Value::of_list(std::move(l));
      }
      if (m == "get") {
        const Value* x = args.empty() || args[0].k != Value::K::Str ? nullptr : v.get(args[0].s);
        return x ? *x : (args.size() > 1 ? args[1] : Value::none());
      }
    }
    fail("the method " + excerpt(m) + " of a " + type_name(v) + " is not supported");
  }

  Value string_method(const std::string& s, const std::string& m, const std::vector<Value>& args) {
    if (m == "startswith" || m == "endswith") {
      const std::string x = str_arg(args, 0, m);
      const bool r = s.size() >= x.size() && (m == "startswith" ? s.compare(0, x.size(), x) == 0
                                                                : s.compare(s.size() - x.size(), x.size(), x) == 0);
      return Value::boolean(r);
    }
    if (m == "strip" || m == "lstrip" || m == "rstrip") {
      const std::string chars = args.empty() || args[0].k == Value::K::None ? "" : str_arg(args, 0, m);
      return Value::str(strip_chars(s, chars, m != "rstrip", m != "lstrip"));
    }
    if (m == "split") return split(s, args);
    if (m == "upper" || m == "lower") return Value::str(cased(s, m == "upper"));
    if (m == "title") return Value::str(title(s));
    if (m == "capitalize") return Value::str(s.empty() ? s : cased(s.substr(0, 1), true) + cased(s.substr(1), false));
    if (m == "replace") return Value::str(replace_all(s, str_arg(args, 0, m), str_arg(args, 1, m)));
    if (m == "find") {
      const size_t at = s.find(str_arg(args, 0, m));
      return Value::integer(at == std::string::npos ? -1 : int64_t(at));
    }
    if (m == "count") {
      const std::string x = str_arg(args, 0, m);
      int64_t n = 0;
      if (!x.empty())
        for (size_t at = s.find(x); at != std::string::npos; at = s.find(x, at + x.size())) ++n;
      return Value::integer(n);
    }
    fail("the string method " + excerpt(m) + " is not supported");
  }

  // ---- filters and tests

  Value filter(const Expr& e) {
    const Value v = eval(*e.a[0]);
    const std::vector<Value> args = args_of(e, 1);
    auto kwarg = [&](const char* key) -> const ExprP* {
      for (const auto& [k, x] : e.kw)
        if (k == key) return &x;
      return nullptr;
    };
    const std::string& f = e.name;
    if (f == "trim") {
      if (v.k != Value::K::Str) fail("trim needs a string, not a " + std::string(type_name(v)));
      return Value::str(strip_chars(v.s, "", true, true));
    }
    if (f == "length" || f == "count") {
      if (v.k == Value::K::Str) return Value::integer(int64_t(chars_of(v.s).size()));
      if (v.k == Value::K::List) return Value::integer(int64_t(v.list->size()));
      if (v.k == Value::K::Dict) return Value::integer(int64_t(v.dict->size()));
      fail("length of a " + std::string(type_name(v)));
    }
    if (f == "tojson") {
      const ExprP* ind = kwarg("indent");
      const Value iv = ind ? eval(**ind) : (args.empty() ? Value() : args[0]);
      return Value::str(to_json(v, iv.k == Value::K::Int ? int(std::clamp<int64_t>(iv.i, 0, 16)) : 0, 0));
    }
    if (f == "upper" || f == "lower") return Value::str(cased(to_str(v), f == "upper"));
    if (f == "capitalize") return string_method(to_str(v), "capitalize", {});
    if (f == "title") return Value::str(title(to_str(v)));
    if (f == "string") return Value::str(to_str(v));
    if (f == "safe" || f == "e" || f == "escape") {
      if (f == "safe") return v;
      return Value::str(html_escape(to_str(v)));
    }
    if (f == "default" || f == "d") {
      const bool boolean = args.size() > 1 && truthy(args[1]);
      if (v.k == Value::K::Undefined || (boolean && !truthy(v))) return args.empty() ? Value::str("") : args[0];
      return v;
    }
    if (f == "first" || f == "last") {
      const List items = items_of(v);
      if (items.empty()) return Value();
      return f == "first" ? items.front() : items.back();
    }
    if (f == "join") {
      const std::string sep = args.empty() ? "" : to_str(args[0]);
      std::string o;
      const List items = items_of(v);
      for (size_t k = 0; k < items.size(); ++k) o += (k ? sep : "") + to_str(items[k]);
      return Value::str(o);
    }
    if (f == "list") return Value::of_list(items_of(v));
    if (f == "reverse") {
      if (v.k == Value::K::Str) {
        std::vector<std::string> chars = chars_of(v.s);
        std::string r;
        for (auto it = chars.rbegin(); it != chars.rend(); ++it) r += *it;
        return Value::str(r);
      }
      List items = items_of(v);
      std::reverse(items.begin(), items.end());
      return Value::of_list(std::move(items));
    }
    if (f == "items") return method(v, "items", {});
    if (f == "int") {
      if (v.k == Value::K::Float) return Value::integer(int64_t(v.f));
      if (v.k == Value::K::Str) return Value::integer(std::strtoll(v.s.c_str(), nullptr, 10));
      return v.k == Value::K::Int ? v : Value::integer(v.k == Value::K::Bool ? v.b : 0);
    }
    if (f == "float")
      return Value::real(v.number() ? v.num() : v.k == Value::K::Str ? std::strtod(v.s.c_str(), nullptr) : 0);
    if (f == "abs") {
      if (v.k == Value::K::Int) return Value::integer(v.i < 0 ? -v.i : v.i);
      if (v.k == Value::K::Float) return Value::real(std::fabs(v.f));
      fail("abs of a " + std::string(type_name(v)));
    }
    if (f == "replace") {
      if (args.size() < 2) fail("replace needs two arguments");
      return Value::str(replace_all(to_str(v), to_str(args[0]), to_str(args[1])));
    }
    if (f == "selectattr" || f == "rejectattr") return select_attr(v, args, f == "selectattr");
    if (f == "map") {
      const ExprP* attr = kwarg("attribute");
      if (!attr) fail("map is supported with attribute=... only");
      const Value name = eval(**attr);
      List out;
      for (const Value& x : items_of(v)) out.push_back(attribute(x, to_str(name)));
      return Value::of_list(std::move(out));
    }
    fail("the filter " + excerpt(f) + " is not supported");
  }

  static std::string html_escape(const std::string& s) {
    std::string o;
    for (char c : s) {
      switch (c) {
        case '&':
          o += "&amp;";
          break;
        case '<':
          o += "&lt;";
          break;
        case '>':
          o += "&gt;";
          break;
        case '"':
          o += "&#34;";
          break;
        case '\'':
          o += "&#39;";
          break;
        default:
          o += c;
      }
    }
    return o;
  }

  Value select_attr(const Value& v, const std::vector<Value>& args, bool keep) {
    if (args.empty() || args[0].k != Value::K::Str) fail("selectattr needs an attribute name");
    List out;
    for (const Value& x : items_of(v)) {
      const Value a = attribute(x, args[0].s);
      const bool pass = args.size() < 2 ? truthy(a) : run_test(to_str(args[1]), a, {args.begin() + 2, args.end()});
      if (pass == keep) out.push_back(x);
    }
    return Value::of_list(std::move(out));
  }

  bool test(const Expr& e) {
    const Value v = eval(*e.a[0]);
    return run_test(e.name, v, args_of(e, 1));
  }

  bool run_test(const std::string& t, const Value& v, const std::vector<Value>& args) {
    using K = Value::K;
    if (t == "defined") return v.k != K::Undefined;
    if (t == "undefined") return v.k == K::Undefined;
    if (t == "none") return v.k == K::None;
    if (t == "string") return v.k == K::Str;
    if (t == "number") return v.number();
    if (t == "integer") return v.k == K::Int;
    if (t == "float") return v.k == K::Float;
    if (t == "boolean") return v.k == K::Bool;
    if (t == "true" || t == "false") return v.k == K::Bool && v.b == (t == "true");
    if (t == "mapping") return v.k == K::Dict;
    if (t == "iterable") return v.k == K::List || v.k == K::Dict || v.k == K::Str;
    if (t == "sequence") return v.k == K::List || v.k == K::Str || v.k == K::Dict;
    if (t == "callable") return false;
    if (t == "even" || t == "odd") return v.k == K::Int && (((v.i % 2) + 2) % 2 == (t == "odd" ? 1 : 0));
    if (t == "divisibleby") {
      if (v.k != K::Int || args.empty() || args[0].k != K::Int || args[0].i == 0) fail("divisibleby needs integers");
      return v.i % args[0].i == 0;
    }
    if (t == "equalto" || t == "eq" || t == "==" || t == "sameas") return !args.empty() && equal(v, args[0]);
    if (t == "ne" || t == "!=") return args.empty() || !equal(v, args[0]);
    if (t == "in") return !args.empty() && contains(args[0], v);
    fail("the test " + excerpt(t) + " is not supported");
  }

  std::vector<Value> scopes_;
  int64_t steps_ = 0;
  int loops_ = 0;
  int line_ = 0;
};

}  // namespace

std::string render_chat_template(const std::string& tmpl, const ChatTemplateInput& in) {
  if (tmpl.size() > kMaxChatOutput) throw Error("chat template: longer than 16 MB");
  const std::vector<Node> nodes = StmtParser(split_template(tmpl)).parse();
  Value globals = Value::of_dict();
  globals.put("messages", from_json(chat_messages(in.messages)));
  globals.put("bos_token", Value::str(in.bos_token));
  globals.put("eos_token", Value::str(in.eos_token));
  globals.put("add_generation_prompt", Value::boolean(in.add_generation_prompt));
  if (in.extra.is_object())
    for (auto it = in.extra.begin(); it != in.extra.end(); ++it) globals.put(it.key(), from_json(*it));
  Renderer r(std::move(globals));
  std::string out;
  r.render(nodes, out);
  return out;
}

json chat_messages(const json& doc) {
  if (!doc.is_array()) throw Error("the messages must be a JSON list of {\"role\": ..., \"content\": ...} objects");
  for (size_t k = 0; k < doc.size(); ++k) {
    const json& m = doc[k];
    const std::string at = "message " + std::to_string(k + 1);
    if (!m.is_object()) throw Error(at + " is not an object {\"role\": ..., \"content\": ...}");
    if (!m.contains("role") || !m["role"].is_string()) throw Error(at + ": \"role\" must be a string");
    if (!m.contains("content") || !m["content"].is_string()) throw Error(at + ": \"content\" must be a string");
  }
  return doc;
}

}  // namespace ds
