#include "tokenizer/jinja/template.h"

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/parser.h"

namespace ferry::tokenizer::jinja {

namespace {

Error to_error(const TemplateError& e) {
    if (e.line() > 0) return make_error("line {}: {}", e.line(), e.what());
    return make_error("{}", e.what());
}

std::tm local_now() {
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    localtime_r(&t, &tm);
    return tm;
}

}  // namespace

Expected<Template> Template::parse(std::string_view source) {
    try {
        Template t;
        t.body_ = std::make_shared<const Body>(jinja::parse(source));
        return t;
    } catch (const TemplateError& e) {
        return to_error(e);
    } catch (const std::exception& e) {
        return make_error("the template could not be parsed: {}", e.what());
    }
}

Expected<std::string> Template::render(const std::vector<std::pair<std::string, Value>>& vars,
                                       const RenderOptions& options) const {
    try {
        auto globals = std::make_shared<Frame>();
        add_globals(*globals);
        for (const auto& [name, v] : vars) globals->set(name, v);
        Interpreter in(options.limits, options.now ? *options.now : local_now());
        return in.render(*body_, std::move(globals));
    } catch (const TemplateError& e) {
        return to_error(e);
    } catch (const std::exception& e) {
        // A bug here must not take the server down with it: say so instead.
        return make_error("the template could not be rendered: {}", e.what());
    }
}

}  // namespace ferry::tokenizer::jinja
