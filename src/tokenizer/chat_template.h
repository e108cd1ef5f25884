// Renders a conversation into the prompt text a model was trained on. Not a Jinja engine:
// the template source is recognised as one of the families ferry knows (ChatML, Llama-3,
// ...); anything else is refused with a message rather than rendered wrongly.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace ferry::tokenizer {

struct ChatMessage {
    std::string role;  // "system", "user", "assistant"
    std::string content;
};

class ChatTemplate {
  public:
    enum class Family { ChatML, Llama3, Llama2, Gemma };

    // source: the model's tokenizer.chat_template (empty means "none": refused).
    static Expected<ChatTemplate> from_source(const std::string& source, std::string bos_text,
                                              std::string eos_text);
    std::string apply(const std::vector<ChatMessage>& messages,
                      bool add_generation_prompt = true) const;
    Family family() const { return family_; }
    const char* family_name() const;

  private:
    Family family_ = Family::ChatML;
    std::string default_system_;  // injected when the template does so (SmolLM2 does)
    std::string bos_, eos_;
};

}  // namespace ferry::tokenizer
