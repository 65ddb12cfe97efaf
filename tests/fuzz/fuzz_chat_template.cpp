// libFuzzer target: chat templates (core/text/chat_template.cpp). Input: a template, then
// kSplit, then the messages as JSON (any JSON, or none). The template is rendered with
// those messages when they parse, else with one user message; every input must render or
// throw ds::Error (a template of deep nesting, endless loops or huge output included).
#include <nlohmann/json.hpp>

#include "fuzz_common.h"
#include "text/chat_template.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* chatml =
      "{%- for m in messages %}{{- '<|im_start|>' + m.role + '\\n' + m['content'] | trim + '<|im_end|>\\n' }}"
      "{%- endfor %}{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
  const char* loops =
      "{% set ns = namespace(n=0) %}{% for m in messages[::-1] if m.role != 'system' %}{% set ns.n = ns.n + 1 %}"
      "{{ loop.index0 }}{{ m.content.split(' ')[-1].lstrip('x') }}{% else %}none{% endfor %}{{ ns.n | tojson }}"
      "{% if messages | length > 2 %}{{ raise_exception('too many') }}{% endif %}";
  const std::string msgs = R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}])";
  fuzz::seed("chatml", std::string(chatml) + std::string(fuzz::kSplit) + msgs);
  fuzz::seed("loops", std::string(loops) + std::string(fuzz::kSplit) + msgs);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<std::string_view> p = fuzz::split(fuzz::as_view(data, size), 2);
  ds::ChatTemplateInput in;
  in.bos_token = "<s>";
  in.eos_token = "</s>";
  const nlohmann::json j = nlohmann::json::parse(p[1], nullptr, false);
  in.messages = j.is_discarded() ? nlohmann::json::parse(R"([{"role": "user", "content": "Hi"}])") : j;
  try {
    (void)ds::render_chat_template(std::string(p[0]), in);
  } catch (const ds::Error&) {
  }
  return 0;
}
