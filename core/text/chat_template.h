#pragma once
// Chat templates: the Jinja templates that instruct models keep in tokenizer_config.json
// ("chat_template") or in GGUF metadata (tokenizer.chat_template), rendered as the
// transformers library's apply_chat_template(messages, add_generation_prompt=True,
// tokenize=False) renders them: Jinja with trim_blocks and lstrip_blocks on, the
// variables messages, bos_token, eos_token and add_generation_prompt, and the functions
// raise_exception and strftime_now.
//
// The interpreter covers the part of Jinja these templates use:
//  * tags {{ }}, {% %}, {# #} with the whitespace controls "-" and "+";
//  * statements if / elif / else, for (over lists, strings and dicts' items, with
//    "for a, b in", an "if" filter, an else branch, loop.index / index0 / first / last /
//    length / revindex / revindex0 / previtem / nextitem, break and continue), set
//    (names, namespace attributes, and the block form), generation blocks (rendered as
//    their content);
//  * expressions: None / True / False (and lower case), numbers, strings, lists, dicts,
//    attribute and item access, slices, the operators + - * / // % ** ~ == != < > <= >=
//    in, not in, and, or, not, and "a if c else b";
//  * filters: trim, length/count, tojson (as the transformers library defines it: JSON
//    with ", " and ": ", keys in their order, non-ASCII characters kept), upper, lower, capitalize, title, default/d,
//    first, last, join, string, list, int, float, abs, replace, reverse, items, safe,
//    selectattr / rejectattr (with a test), map(attribute=...);
//  * tests: defined, undefined, none, string, number, integer, float, boolean, true,
//    false, mapping, iterable, sequence, even, odd, divisibleby, equalto / eq / ==, ne;
//  * strings index, slice and count by characters (UTF-8), as Python's do; upper, lower and
//    title change ASCII letters only;
//  * methods: strings' startswith, endswith, split, strip, lstrip, rstrip, upper, lower,
//    title, capitalize, replace, find, count; dicts' items, keys, values, get;
//  * functions: namespace(...), range(...), raise_exception(message) (the template's
//    message becomes the error), strftime_now(format).
// Anything else (macros, imports, call blocks, an unknown filter or test) is a ds::Error
// naming it and where it is in the template; so is a template that runs too long or
// makes more than kMaxOutput bytes.
#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

namespace ds {

struct ChatTemplateInput {
  // [{"role": ..., "content": ...}, ...]; ordered: a template's tojson writes the keys in
  // their order, as Python's dicts keep it.
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  std::string bos_token, eos_token;
  bool add_generation_prompt = true;
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();  // more variables (e.g. "enable_thinking": false)
};

constexpr size_t kMaxChatOutput = size_t{16} << 20;

// The text the template makes of the input. Throws ds::Error naming the problem: the
// template's syntax (with the line), an unsupported construct, a value of the wrong type
// (e.g. a message whose content is not a string where the template adds it to one), or
// the template's own raise_exception message.
std::string render_chat_template(const std::string& tmpl, const ChatTemplateInput& in);

// The messages of a JSON document: an array of objects each with "role" and "content"
// strings (other keys kept); throws ds::Error naming the message and the field.
nlohmann::ordered_json chat_messages(const nlohmann::ordered_json& doc);

}  // namespace ds
