// decoderscope-cli chat and generate --chat: the prompt --render prints is exactly what
// the fixtures' chat_reference.jsonl holds (Python's jinja2 for the transformers
// library); a model folder with Qwen3's tokenizer answers inside its template, the answer
// alone printed and equal to greedy decoding from the template's ids; bad messages and a
// model without a template end in messages naming the problem.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "helpers.h"
#include "io/hf_writer.h"
#include "io/loader.h"
#include "model/model.h"
#include "text/gguf_tokenizer.h"

namespace {

namespace fs = std::filesystem;
using ds::test::contains;
using nlohmann::json;

// The first conversation of a chat_reference.jsonl, written as a messages file.
json first_reference(const fs::path& ref, const std::string& messages_path) {
  std::ifstream in(ref);
  std::string line;
  std::getline(in, line);
  const json j = json::parse(line);
  std::ofstream(messages_path) << j["messages"].dump();
  return j;
}

TEST(CliChat, RenderPrintsExactlyTheTemplatesPrompt) {
  ds::test::TempDir tmp;
  const std::string msgs = tmp.path("messages.json");
  struct Source {
    fs::path tokenizer, reference;
  };
  const fs::path hf = ds::test::fixture("hf-tokenizers"), vocab = ds::test::fixture("gguf/vocab");
  for (const Source& s : {Source{hf / "llama3", hf / "llama3" / "chat_reference.jsonl"},
                          Source{vocab / "ggml-vocab-phi-3.gguf", vocab / "ggml-vocab-phi-3.chat_reference.jsonl"}}) {
    DS_NEED_FIXTURE(s.reference, "the chat prompts");
    const json want = first_reference(s.reference, msgs);
    const ds::test::CliRun r = ds::test::run_cli("chat --tokenizer " + ds::test::quoted(s.tokenizer) + " --messages " +
                                                 ds::test::quoted(msgs) + " --render");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out, want["prompt"].get<std::string>()) << s.tokenizer;
  }
}

TEST(CliChat, BadMessagesAndMissingTemplatesAreNamed) {
  const fs::path tok = ds::test::fixture("hf-tokenizers") / "qwen3";
  const fs::path plain = ds::test::fixture("gguf/models") / "aidreams260K.gguf";
  DS_NEED_FIXTURE(tok / "tokenizer.json", "the chat errors");
  ds::test::TempDir tmp;
  auto run = [&](const std::string& messages, const fs::path& t) {
    const std::string p = tmp.write("m.json", messages);
    return ds::test::run_cli("chat --tokenizer " + ds::test::quoted(t) + " --messages " + ds::test::quoted(p) +
                             " --render");
  };
  ds::test::CliRun r = run(R"([{"role": "user", "content": ["a", "b"]}])", tok);
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "message 1") && contains(r.err, "content")) << r.err;
  r = run(R"({"role": "user"})", tok);
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "list")) << r.err;
  r = run("[{", tok);
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "not valid JSON")) << r.err;
  if (fs::exists(plain)) {
    r = ds::test::run_cli("generate --model " + ds::test::quoted(plain) + " --chat hello");
    EXPECT_EQ(r.code, 1);
    EXPECT_TRUE(contains(r.err, "no chat template")) << r.err;
  }
}

TEST(CliChat, GenerateChatAnswersInsideTheTemplate) {
  const fs::path tok = ds::test::fixture("hf-tokenizers") / "qwen3";
  DS_NEED_FIXTURE(tok / "tokenizer.json", "a chat with a model");
  ds::test::TempDir tmp;
  const std::string dir = tmp.sub("qwen3-chat");
  ds::test::write_chat_model(dir, tok);
  const ds::LoadedModel m = ds::load_model(dir);
  ASSERT_TRUE(m.tokenizer);
  const auto& vt = dynamic_cast<const ds::VocabTokenizer&>(*m.tokenizer);
  const int im_start = vt.find("<|im_start|>"), im_end = vt.find("<|im_end|>");
  EXPECT_NE(std::find(m.stop_ids.begin(), m.stop_ids.end(), im_end), m.stop_ids.end());  // a turn's end stops
  const json msgs = {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Why?"}}};
  const std::vector<int> prompt =
      ds::encode_chat(*m.tokenizer, m.chat, m.special_ids, ds::render_chat(m.chat, msgs, m.name));
  ASSERT_FALSE(prompt.empty());
  EXPECT_EQ(prompt.front(), im_start);
  EXPECT_EQ(std::count(prompt.begin(), prompt.end(), im_start), 3);
  // Greedy decoding from the template's ids, up to 12 tokens or a stop token.
  ds::Engine e(m.model);
  ds::MatRM logits = e.forward(prompt);
  std::vector<int> want;
  for (int i = 0; i < 12; ++i) {
    Eigen::Index best;
    logits.row(0).maxCoeff(&best);
    if (std::find(m.stop_ids.begin(), m.stop_ids.end(), int(best)) != m.stop_ids.end()) break;
    want.push_back(int(best));
    logits = e.forward(std::span<const int>(&want.back(), 1));
  }
  const int steps = int(prompt.size()) + 11;  // positions in all: the last token drawn is printed, not run
  const ds::test::CliRun r = ds::test::run_cli("generate --model " + ds::test::quoted(dir) + " --chat " +
                                               ds::test::quoted("Why?") + " --system " + ds::test::quoted("Be brief.") +
                                               " --temperature 0 --ids --steps " + std::to_string(steps));
  ASSERT_EQ(r.code, 0) << r.err;
  std::string text;
  for (size_t i = 0; i < want.size(); ++i) text += (i ? " " : "") + std::to_string(want[i]);
  EXPECT_EQ(r.out, text + "\n");
}

}  // namespace
