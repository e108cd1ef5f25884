#include "cli/line_editor.h"

#include <histedit.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "cli/interrupt.h"

namespace ferry::cli {

struct LineEditor::Impl {
    EditLine* el = nullptr;
    History* hist = nullptr;
    std::string prompt;
    std::string history_file;
    bool warned = false;

    static const char* prompt_of(EditLine* el) {
        void* self = nullptr;
        el_get(el, EL_CLIENTDATA, &self);
        return static_cast<Impl*>(self)->prompt.c_str();
    }
};

LineEditor::LineEditor(const char* program, std::string history_file)
    : impl_(std::make_unique<Impl>()) {
    if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO)) return;
    Impl& m = *impl_;
    m.history_file = std::move(history_file);
    m.el = el_init(program, stdin, stdout, stderr);
    if (!m.el) return;  // a terminal libedit cannot drive reads plain lines
    m.hist = history_init();
    HistEvent ev;
    history(m.hist, &ev, H_SETSIZE, 1000);
    history(m.hist, &ev, H_SETUNIQUE, 1);
    if (!m.history_file.empty()) history(m.hist, &ev, H_LOAD, m.history_file.c_str());
    el_set(m.el, EL_CLIENTDATA, &m);
    el_set(m.el, EL_PROMPT, &Impl::prompt_of);
    el_set(m.el, EL_EDITOR, "emacs");
    el_set(m.el, EL_SIGNAL, 0);  // Ctrl-C is ours (interrupt::Catcher), not a reset of the tty
    el_set(m.el, EL_HIST, history, m.hist);
    el_source(m.el, nullptr);  // the user's ~/.editrc, as every libedit program reads it
}

LineEditor::~LineEditor() {
    if (impl_->hist) history_end(impl_->hist);
    if (impl_->el) el_end(impl_->el);
}

bool LineEditor::interactive() const {
    return impl_->el != nullptr;
}

LineEditor::Result LineEditor::read(const std::string& prompt) {
    Impl& m = *impl_;
    if (!m.el) {
        std::string line;
        if (!std::getline(std::cin, line)) return {Status::End, {}};
        return {Status::Line, std::move(line)};
    }
    m.prompt = prompt;
    interrupt::clear();
    int n = 0;
    const char* got = el_gets(m.el, &n);
    if (!got || n <= 0) {
        const bool interrupted = interrupt::pending();
        interrupt::clear();
        std::fputs(interrupted ? "^C\n" : "\n", stdout);
        std::fflush(stdout);
        return {interrupted ? Status::Interrupted : Status::End, {}};
    }
    std::string line(got, size_t(n));
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    return {Status::Line, std::move(line)};
}

void LineEditor::remember(const std::string& line) {
    Impl& m = *impl_;
    if (!m.hist || line.empty()) return;
    HistEvent ev;
    history(m.hist, &ev, H_ENTER, line.c_str());
    if (m.history_file.empty()) return;
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(m.history_file).parent_path(), ec);
    if (history(m.hist, &ev, H_SAVE, m.history_file.c_str()) < 0 && !m.warned) {
        m.warned = true;  // once: the session goes on, with history kept in memory only
        std::fprintf(stderr,
                     "ferry chat: cannot write the history to %s; keeping it for this "
                     "session only\n",
                     m.history_file.c_str());
    }
}

std::string LineEditor::default_history_file() {
    if (const char* s = std::getenv("XDG_STATE_HOME"); s && *s)
        return std::string(s) + "/ferry/chat_history";
    if (const char* h = std::getenv("HOME"); h && *h)
        return std::string(h) + "/.local/state/ferry/chat_history";
    return {};
}

}  // namespace ferry::cli
