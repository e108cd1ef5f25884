// The terminal's input line for `ferry chat`: editing, history (kept in a file across
// sessions) and Ctrl-C through libedit when stdin is a terminal; plain lines otherwise, so a
// piped conversation reads exactly as typed.
#pragma once

#include <memory>
#include <string>

namespace ferry::cli {

class LineEditor {
  public:
    enum class Status { Line, Interrupted, End };
    struct Result {
        Status status;
        std::string line;  // without its newline
    };

    // history_file empty: history for this session only.
    LineEditor(const char* program, std::string history_file);
    ~LineEditor();
    LineEditor(const LineEditor&) = delete;
    LineEditor& operator=(const LineEditor&) = delete;

    bool interactive() const;
    Result read(const std::string& prompt);
    // A line worth recalling with the up arrow (commands included; empty lines are not).
    void remember(const std::string& line);

    // $XDG_STATE_HOME/ferry/chat_history, or ~/.local/state/ferry/chat_history; empty when
    // neither is known.
    static std::string default_history_file();

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace ferry::cli
