// Ctrl-C as a request, not a kill: while a Catcher lives, SIGINT only sets a flag that the
// interactive commands poll (stop the reply, drop the line being typed) and the program goes
// on; a second Ctrl-C before the first was acted on ends the program. The terminal reader
// (line_editor) looks at the flag between short waits, whichever thread took the signal.
#pragma once

namespace ferry::cli::interrupt {

class Catcher {
  public:
    Catcher();
    ~Catcher();
    Catcher(const Catcher&) = delete;
    Catcher& operator=(const Catcher&) = delete;
};

// Whether Ctrl-C came since the last clear().
bool pending();
void clear();

}  // namespace ferry::cli::interrupt
