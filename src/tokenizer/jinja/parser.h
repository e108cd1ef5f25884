// Tokens → the template's statements, following jinja2's grammar and operator precedence.
// Filters and tests are checked by name here, as jinja2 checks them when it compiles, so a
// template that asks for something this interpreter lacks is refused when the model loads
// rather than when a user's request reaches it.
#pragma once

#include <string_view>

#include "tokenizer/jinja/ast.h"

namespace ferry::tokenizer::jinja {

// Throws TemplateError with the offending line.
Body parse(std::string_view source);

}  // namespace ferry::tokenizer::jinja
