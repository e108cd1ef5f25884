#include "cli/line_editor.h"

#include <histedit.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <clocale>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "cli/interrupt.h"
#include "grammar/utf8.h"

namespace ferry::cli {

struct LineEditor::Impl {
    EditLine* el = nullptr;
    History* hist = nullptr;
    std::string prompt;
    std::string history_file;
    bool warned = false;

    // libedit's reader, replaced: a Ctrl-C that lands just before the read starts would
    // leave the built-in blocking read() waiting; this one waits in slices and looks at the
    // flag before each, so the line is dropped within a tenth of a second either way.
    static int read_char(EditLine*, wchar_t* out) {
        unsigned char b = 0;
        for (;;) {
            if (interrupt::pending()) {
                errno = EINTR;
                return -1;
            }
            pollfd p{STDIN_FILENO, POLLIN, 0};
            const int r = poll(&p, 1, 100);
            if (r <= 0) continue;  // a timeout, or EINTR: look at the flag again
            const ssize_t n = ::read(STDIN_FILENO, &b, 1);
            if (n == 0) return 0;
            if (n < 0) {
                if (errno == EINTR || errno == EAGAIN) continue;
                return -1;
            }
            break;
        }
        // One UTF-8 character; a byte that does not start one stands for itself.
        const int more = grammar::utf8_continuations(b);
        uint32_t cp = more <= 0 ? b : (b & (0x3fu >> more));
        for (int k = 0; k < more; ++k) {
            unsigned char c = 0;
            if (::read(STDIN_FILENO, &c, 1) != 1 || (c >> 6) != 2) {
                cp = b;
                break;
            }
            cp = (cp << 6) | (c & 0x3fu);
        }
        *out = static_cast<wchar_t>(cp);
        return 1;
    }

    static const char* prompt_of(EditLine* el) {
        void* self = nullptr;
        el_get(el, EL_CLIENTDATA, &self);
        return static_cast<Impl*>(self)->prompt.c_str();
    }
};

LineEditor::LineEditor(const char* program, std::string history_file)
    : impl_(std::make_unique<Impl>()) {
    if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO)) return;
    // The terminal's character set (UTF-8 in any current locale), so libedit keeps what is
    // typed beyond ASCII; the tokenizer does not depend on the locale.
    std::setlocale(LC_CTYPE, "");
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
    el_set(m.el, EL_GETCFN, &Impl::read_char);
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
