// Chat templates (core/text/chat_template.h): the templates of real tokenizers
// (../shared/fixtures/hf-tokenizers/{llama3,qwen3}, gguf/vocab/ggml-vocab-{qwen2,phi-3})
// render each conversation exactly as Python's jinja2 rendered it for the transformers
// library (the fixtures' chat_reference.jsonl); the Jinja rules the templates rely on
// (whitespace control, trim_blocks and lstrip_blocks, loop variables, scoping and
// namespaces, slices, filters, tests, methods) against results worked out by hand from
// the Jinja documentation; bad templates and messages end in messages naming the problem.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "helpers.h"
#include "io/gguf.h"
#include "io/loader.h"
#include "text/chat_template.h"
#include "text/gguf_tokenizer.h"
#include "text/hf_tokenizer.h"

namespace {

namespace fs = std::filesystem;
using ds::test::contains;
using ds::test::error_of;
using nlohmann::json;

std::string render(const std::string& t, const nlohmann::ordered_json& messages = nlohmann::ordered_json::array(),
                   const json& extra = json::object()) {
  ds::ChatTemplateInput in;
  in.messages = messages;
  in.bos_token = "<s>";
  in.eos_token = "</s>";
  in.extra = extra;
  return ds::render_chat_template(t, in);
}

// Each line of a chat_reference.jsonl rendered with the template, bos and eos given.
void expect_references(const fs::path& ref, const std::string& tmpl, const std::string& bos, const std::string& eos) {
  std::ifstream in(ref);
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const json j = json::parse(line);
    ds::ChatTemplateInput ci;
    ci.messages = j["messages"];
    ci.bos_token = bos;
    ci.eos_token = eos;
    EXPECT_EQ(ds::render_chat_template(tmpl, ci), j["prompt"].get<std::string>()) << ref << " conversation " << n;
    ++n;
  }
  EXPECT_GE(n, 4) << ref;
}

TEST(ChatTemplate, HuggingFaceTokenizersRenderTheirConversationsExactly) {
  for (const char* name : {"llama3", "qwen3"}) {
    const fs::path dir = ds::test::fixture("hf-tokenizers") / name;
    DS_NEED_FIXTURE(dir / "chat_reference.jsonl", "the chat templates");
    const ds::HfTokenizerInfo info = ds::load_hf_tokenizer(dir.string());
    ASSERT_FALSE(info.chat_template.empty()) << name;
    expect_references(dir / "chat_reference.jsonl", info.chat_template, info.bos_token, info.eos_token);
  }
}

TEST(ChatTemplate, GgufVocabulariesRenderTheirConversationsExactly) {
  for (const char* name : {"qwen2", "phi-3"}) {
    const fs::path vocab = ds::test::fixture("gguf/vocab") / (std::string("ggml-vocab-") + name + ".gguf");
    const fs::path ref =
        ds::test::fixture("gguf/vocab") / (std::string("ggml-vocab-") + name + ".chat_reference.jsonl");
    DS_NEED_FIXTURE(ref, "the chat templates of GGUF files");
    const ds::VocabData v = ds::gguf_vocab(ds::GgufFile::open(vocab.string()));
    ASSERT_FALSE(v.chat_template.empty()) << name;
    auto text = [&](int id) { return id >= 0 ? v.tokens[size_t(id)] : std::string(); };
    expect_references(ref, v.chat_template, text(v.bos_id), text(v.eos_id));
  }
}

// A rendered prompt's special tokens become those tokens: the same conversation in
// Qwen2's GGUF vocabulary (control tokens split out by encode_chat) and in Qwen3's
// tokenizer.json (added tokens matched by the tokenizer) gives the same ids, which start
// with <|im_start|> and hold <|im_end|> once per message.
TEST(ChatTemplate, SpecialTokensOfTheTemplateBecomeThoseTokens) {
  const fs::path hf = ds::test::fixture("hf-tokenizers") / "qwen3";
  const fs::path gguf = ds::test::fixture("gguf/vocab") / "ggml-vocab-qwen2.gguf";
  DS_NEED_FIXTURE(hf / "tokenizer.json", "the chat prompts' ids");
  DS_NEED_FIXTURE(gguf, "the chat prompts' ids");
  const ds::HfTokenizerInfo info = ds::load_hf_tokenizer(hf.string());
  const ds::LoadedModel::Chat hf_chat{info.chat_template, info.bos_token, info.eos_token, true};
  const ds::VocabData v = ds::gguf_vocab(ds::GgufFile::open(gguf.string()));
  const ds::VocabTokenizer gt(v);
  std::vector<int> controls;
  for (int id = 0; id < gt.vocab_size(); ++id)
    if (gt.type(id) == ds::TokenType::Control) controls.push_back(id);
  const ds::LoadedModel::Chat gguf_chat{v.chat_template, "", "", false};
  const json msgs = json::parse(R"([{"role": "system", "content": "Be brief."},
                                    {"role": "user", "content": "What is a <b>token</b>?\nSay it twice."}])");
  const std::string text = ds::render_chat(hf_chat, msgs, "qwen3");
  const std::vector<int> a = ds::encode_chat(*info.tokenizer, hf_chat, info.special_ids, text);
  const std::vector<int> b = ds::encode_chat(gt, gguf_chat, controls, text);
  EXPECT_EQ(a, b);
  const int start = gt.find("<|im_start|>"), end = gt.find("<|im_end|>");
  ASSERT_GE(start, 0);
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a.front(), start);
  EXPECT_EQ(std::count(a.begin(), a.end(), end), 2);
  EXPECT_EQ(std::count(a.begin(), a.end(), start), 3);  // system, user, and the generation prompt
  // Without splitting, the GGUF tokenizer spells the control tokens' text out.
  const std::vector<int> plain = gt.encode(text, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), start), 0);
}

// The rules behind the templates, each small enough to check by hand.
TEST(ChatTemplate, WhitespaceControlTrimBlocksAndLstripBlocks) {
  // trim_blocks: the newline after a block tag goes; lstrip_blocks: the indentation before it.
  EXPECT_EQ(render("{% if true %}\n  a\n  {% endif %}\nb"), "  a\nb");
  // "-" strips every whitespace on its side, newlines included.
  EXPECT_EQ(render("x  \n {{- 'y' -}} \n z"), "xyz");
  // Expression tags keep their newline.
  EXPECT_EQ(render("{{ 'a' }}\nb"), "a\nb");
  // "+" turns lstrip_blocks off for the tag; "+%}" keeps the newline after it.
  EXPECT_EQ(render("  {%+ if true %}x{% endif +%}\ny"), "  x\ny");
  // Comments vanish and follow the block rules.
  EXPECT_EQ(render("a\n  {# note #}\nb"), "a\nb");
  // A tag that is not at a line's start keeps the spaces before it.
  EXPECT_EQ(render("a  {% if true %}b{% endif %}"), "a  b");
}

TEST(ChatTemplate, LoopsScopesAndNamespaces) {
  const json msgs = json::parse(R"([{"role":"system","content":"S"},{"role":"user","content":"U1"},
                                     {"role":"assistant","content":"A1"},{"role":"user","content":"U2"}])");
  EXPECT_EQ(render("{% for m in messages %}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|"
                   "{% endfor %}",
                   msgs),
            "0TrueFalse4|1FalseFalse4|2FalseFalse4|3FalseTrue4|");
  // set inside a loop does not leave it; a namespace does.
  EXPECT_EQ(render("{% set x = 1 %}{% set ns = namespace(y=1) %}{% for m in messages %}{% set x = 2 %}"
                   "{% set ns.y = ns.y + 1 %}{% endfor %}{{ x }},{{ ns.y }}",
                   msgs),
            "1,5");
  EXPECT_EQ(render("{% for m in messages[::-1] %}{{ m.content }}{% endfor %}", msgs), "U2A1U1S");
  EXPECT_EQ(render("{% for m in messages[1:] if m.role == 'user' %}{{ m['content'] }}{% else %}none{% endfor %}", msgs),
            "U1U2");
  EXPECT_EQ(render("{% for m in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}"), "a=1;b=2;");
  EXPECT_EQ(render("{% for i in range(5) %}{% if i == 3 %}{% break %}{% endif %}{% if i == 1 %}{% continue %}"
                   "{% endif %}{{ i }}{% endfor %}"),
            "02");
  EXPECT_EQ(render("{% set t %}in {{ 'block' }}{% endset %}[{{ t }}]"), "[in block]");
}

TEST(ChatTemplate, ExpressionsFiltersTestsAndMethods) {
  EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1 + 2 * 3 }}"),
            "3 -4 1 2 3.5 1024 7");
  EXPECT_EQ(render("{{ 'a' ~ 1 ~ none }} {{ 'b' if false else 'c' }} {{ 'x' if false }}|"), "a1None c |");
  EXPECT_EQ(render("{{ ' hi  ' | trim }}|{{ [1, 2, 3] | length }}|{{ 'ab' | upper }}|{{ [3, 4] | join('-') }}"),
            "hi|3|AB|3-4");
  EXPECT_EQ(render("{{ {'a': [1, 'x\"y', none, true, 1.5]} | tojson }}"), "{\"a\": [1, \"x\\\"y\", null, true, 1.5]}");
  EXPECT_EQ(render("{{ undefined_name | default('d') }} {{ '' | default('e', true) }} {{ 'v' | default('f') }}"),
            "d e v");
  EXPECT_EQ(render("{{ x is defined }} {{ none is none }} {{ 'a' is string }} {{ 3 is not string }} "
                   "{{ 4 is divisibleby 2 }} {{ {} is mapping }} {{ not 1 is none }}"),
            "False True True True True True True");
  EXPECT_EQ(render("{{ 'a</think>\\nb'.split('</think>')[-1].lstrip('\\n') }}|{{ 'xxaxx'.strip('x') }}|"
                   "{{ 'Hi'.startswith('H') }}{{ 'Hi'.endswith('H') }}|{{ 'a b  c'.split() | length }}"),
            "b|a|TrueFalse|3");
  EXPECT_EQ(render("{{ 'think' in 'rethinking' }} {{ 2 in [1, 2] }} {{ 'k' not in {'k': 1} }}"), "True True False");
  EXPECT_EQ(render("{{ [{'r': 'a'}, {'r': 'b'}] | selectattr('r', 'equalto', 'b') | map(attribute='r') | join }}"),
            "b");
  EXPECT_EQ(render("{{ 'hello world' | title }} {{ 'abc'[1] }} {{ 'abcdef'[1:4] }} {{ [1, 2, 3][-1] }}"),
            "Hello World b bcd 3");
  EXPECT_EQ(render("{{ bos_token }}{{ eos_token }}{{ add_generation_prompt }}"), "<s></s>True");
  // Strings count, index and slice characters, as Python's do; tojson keeps the keys'
  // order and the characters (the transformers library's tojson).
  const auto msgs = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "ünï😀"}])");
  EXPECT_EQ(render("{{ messages[0].content | length }} {{ messages[0].content[1] }} {{ messages[0].content[::-1] }} "
                   "{{ messages[0].content | reverse }} {{ messages[0].content[-1:] }}",
                   msgs),
            "4 n 😀ïnü 😀ïnü 😀");
  EXPECT_EQ(render("{{ messages | tojson }}", msgs), "[{\"role\": \"user\", \"content\": \"ünï😀\"}]");
}

TEST(ChatTemplate, ErrorsNameTheProblem) {
  EXPECT_TRUE(contains(error_of([] { render("{% if x %}a"); }), "endif"));
  EXPECT_TRUE(contains(error_of([] { render("{{ 'a' "); }), "never closes"));
  EXPECT_TRUE(contains(error_of([] { render("{% macro m() %}{% endmacro %}"); }), "macro"));
  EXPECT_TRUE(contains(error_of([] { render("{{ 1 | frobnicate }}"); }), "frobnicate"));
  EXPECT_TRUE(contains(error_of([] { render("line\n{{ raise_exception('roles must alternate') }}"); }),
                       "roles must alternate"));
  EXPECT_TRUE(contains(error_of([] { render("\n\n{{ 1 + 'a' }}"); }), "line 3"));
  EXPECT_TRUE(contains(error_of([] {
                         render(
                             "{% for i in range(100000) %}{% for j in range(1000) %}{% endfor %}"
                             "{% endfor %}");
                       }),
                       "too long"));
  EXPECT_TRUE(contains(error_of([] { render("{{ " + std::string(500, '(') + "1" + std::string(500, ')') + " }}"); }),
                       "nested too deeply"));
  // Messages that are not {"role": string, "content": string}.
  EXPECT_TRUE(contains(error_of([] { render("x", json::parse(R"([{"role": "user", "content": 3}])")); }), "content"));
  EXPECT_TRUE(contains(error_of([] { render("x", json::parse(R"([{"content": "a"}])")); }), "role"));
  EXPECT_TRUE(contains(error_of([] { render("x", json::parse(R"({"role": "user"})")); }), "list"));
}

}  // namespace
