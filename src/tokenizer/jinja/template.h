// A Jinja2 template parsed once and rendered many times, the way Hugging Face transformers
// renders chat templates (jinja2's ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks
// and loop controls, plus transformers' tojson, raise_exception and strftime_now). Errors are
// values: "line 3: unknown filter 'wordwrap'".
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/value.h"

namespace ferry::tokenizer::jinja {

struct RenderOptions {
    RenderLimits limits;
    std::optional<std::tm> now;  // what strftime_now formats; unset: the local time at render
};

class Template {
  public:
    static Expected<Template> parse(std::string_view source);

    // `vars` are the template's variables (messages, bos_token, ...). Safe to call from many
    // threads at once: the parsed template is never written.
    Expected<std::string> render(const std::vector<std::pair<std::string, Value>>& vars,
                                 const RenderOptions& options = {}) const;

  private:
    std::shared_ptr<const Body> body_;
};

}  // namespace ferry::tokenizer::jinja
