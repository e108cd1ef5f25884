// Speculative decoding switches, spelled the same by `run`, `serve`, `bench decode` and
// `bench throughput`.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "engine/loaded_model.h"
#include "engine/speculation.h"

namespace ferry::cli {

struct SpecOptions {
    std::string method = "off";
    std::string policy = "cost";
    engine::SpecConfig config;
    std::string draft_model;

  private:
    bool serving_ = false;
    CLI::Option *k_ = nullptr, *ngram_min_ = nullptr, *ngram_max_ = nullptr, *tree_ = nullptr,
                *lookahead_n_ = nullptr, *policy_ = nullptr, *draft_ = nullptr, *heads_ = nullptr,
                *medusa_tree_ = nullptr;
    void check_used() const;

  public:
    void add_to(CLI::App& cmd, bool serving);
    // Throws where an option given would have no effect: one that tunes a method other than the
    // one chosen (`--spec-k 8` without --spec, `--draft-model` without --spec draft) would
    // otherwise be dropped without a word. A server keeps every method's options, since each
    // request may choose its own.
    engine::SpecConfig resolved() const;
    // The draft model when --draft-model is given, on the target's backend (exits with a
    // message on failure).
    std::optional<engine::LoadedModel> load_draft(bool progress,
                                                  std::shared_ptr<kernels::Backend> backend) const;
    // A proposer for single-stream generation (nullptr when off); exits on a bad draft.
    std::unique_ptr<engine::Proposer> make(const engine::LoadedModel& target,
                                           const engine::LoadedModel* draft, int64_t max_tokens,
                                           quant::KvDType draft_kv = quant::KvDType::F32) const;
};

}  // namespace ferry::cli
