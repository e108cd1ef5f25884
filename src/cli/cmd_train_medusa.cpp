// `ferry train-medusa -m MODEL [--heads 3] [--text FILE] [-o OUT] ...`: Medusa heads for a model,
// trained by self-distillation on its own greedy continuations of a text
// (calibrate/medusa_training.h), written beside the model (MODEL.medusa.gguf) for
// `--spec medusa`.
#include <cstdio>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "calibrate/medusa_training.h"
#include "cli/calib_text.h"
#include "cli/commands.h"
#include "cli/model_options.h"
#include "core/paths.h"
#include "core/progress.h"
#include "engine/loaded_model.h"
#include "gguf/gguf_writer.h"

namespace ferry::cli {
namespace {

struct TrainMedusaOptions {
    std::string model = "default", text, out, style = "auto";
    calibrate::MedusaTrainOptions train;
    int threads = 0;
    bool json = false, quiet = false;
};

void train_medusa(const TrainMedusaOptions& o) {
    const auto backend =
        take(kernels::make_backend({.threads = resolve_threads(o.threads), .activations = {}}));
    const std::string path = take(resolve_model_path(o.model));
    const std::string out = o.out.empty() ? model::default_medusa_path(path) : o.out;
    // Checked before the work, not after minutes of training.
    if (Status st = gguf::check_output_path(out); !st) throw ExitError(st.error().message);
    engine::LoadedModel lm = take(engine::LoadedModel::load(path, !o.quiet && !o.json, backend));
    std::string text_path;
    // The text only seeds the continuations: a prompt of prompt_len tokens per continuation.
    const int64_t want =
        std::max<int64_t>(o.train.prompt_len,
                          o.train.tokens / std::max(1, o.train.continuation) * o.train.prompt_len +
                              o.train.prompt_len);
    const std::vector<int32_t> text = calibration_tokens(lm, o.text, want, &text_path);
    calibrate::MedusaTrainOptions train = o.train;
    // auto: a chat model learns from its answers, a base model (no template) from its text.
    train.chat = o.style == "chat" || (o.style == "auto" && lm.chat_template);
    if (o.style == "chat" && !lm.chat_template)
        throw ExitError(fmt::format("--style chat: {} (use --style text)", lm.chat_template_error));
    const std::string style = train.chat ? "chat" : "text";
    const bool show = !o.quiet && !o.json;
    if (show)
        std::fprintf(stderr,
                     "ferry train-medusa: %d heads, %lld positions of the model's own greedy %s "
                     "%s\n",
                     o.train.heads, static_cast<long long>(o.train.tokens),
                     train.chat ? "answers to requests about pieces of" : "continuations of",
                     text_path.c_str());
    std::unique_ptr<Progress> bar;
    std::string stage;
    calibrate::MedusaTrainReport rep;
    auto heads = take(calibrate::train_medusa(
        lm, text, train, &rep, [&](const char* what, int64_t done, int64_t total) {
            if (!show) return;
            if (stage != what) {
                if (bar) bar->finish();
                stage = what;
                bar = std::make_unique<Progress>(what, total, true);
            }
            bar->update(done);
        }));
    if (bar) bar->finish();
    if (Status s = heads.save(out); !s) throw ExitError(s.error().message);

    if (o.json) {
        nlohmann::json heads_j = nlohmann::json::array();
        for (size_t k = 0; k < rep.top1_after.size(); ++k)
            heads_j.push_back({{"head", k},
                               {"predicts", fmt::format("t+{}", k + 2)},
                               {"held_out_top1_before", rep.top1_before[k]},
                               {"held_out_top1_after", rep.top1_after[k]},
                               {"loss_first_epoch", rep.loss_first[k]},
                               {"loss_last_epoch", rep.loss_last[k]}});
        const nlohmann::json j = {{"model", path},
                                  {"style", style},
                                  {"out", out},
                                  {"text", text_path},
                                  {"train_positions", rep.train_positions},
                                  {"held_out_positions", rep.held_out_positions},
                                  {"epochs", o.train.epochs},
                                  {"generate_seconds", rep.generate_seconds},
                                  {"train_seconds", rep.train_seconds},
                                  {"heads", heads_j}};
        std::printf("%s\n", j.dump(2).c_str());
        return;
    }
    std::printf(
        "wrote %s: %d heads for %s (%lld positions trained on, %lld held out; %.1f s "
        "generating, %.1f s training)\n",
        out.c_str(), heads.n_heads(), path.c_str(), static_cast<long long>(rep.train_positions),
        static_cast<long long>(rep.held_out_positions), rep.generate_seconds, rep.train_seconds);
    for (size_t k = 0; k < rep.top1_after.size(); ++k)
        std::printf(
            "  head %zu (token t+%zu): held-out top-1 %.1f %% (%.1f %% untrained), loss "
            "%.3f -> %.3f\n",
            k, k + 2, 100 * rep.top1_after[k], 100 * rep.top1_before[k], rep.loss_first[k],
            rep.loss_last[k]);
}

}  // namespace

void add_train_medusa_command(CLI::App& app) {
    auto o = std::make_shared<TrainMedusaOptions>();
    auto* cmd = app.add_subcommand(
        "train-medusa",
        "Train Medusa heads for --spec medusa on the model's own greedy continuations of a text");
    cmd->add_option("-m,--model", o->model, "GGUF model or Hugging Face directory, or 'default'")
        ->capture_default_str();
    cmd->add_option("--text", o->text,
                    "text whose pieces start the continuations (default: data/calib/default.txt)");
    cmd->add_option("-o,--out", o->out, "heads file to write (default: MODEL.medusa.gguf)");
    auto& t = o->train;
    cmd->add_option("--heads", t.heads, "heads to train (head k drafts the token k + 2 places on)")
        ->capture_default_str()
        ->check(CLI::Range(1, 16));
    cmd->add_option("--tokens", t.tokens, "continuation positions to generate and learn from")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{16}, int64_t{1} << 24));
    cmd->add_option("--prompt-len", t.prompt_len, "text tokens each continuation starts from")
        ->capture_default_str()
        ->check(CLI::Range(1, 4096));
    cmd->add_option("--style", o->style,
                    "chat: each piece inside the model's chat template as a request (continue, "
                    "summarise, explain, ...) and the heads learn the model's answers, what "
                    "serving drafts; text: the model continues the plain text; auto: chat where "
                    "the model has a chat template")
        ->capture_default_str()
        ->check(CLI::IsMember({"auto", "chat", "text"}));
    cmd->add_option("--continuation", t.continuation, "greedy tokens per continuation")
        ->capture_default_str()
        ->check(CLI::Range(4, 4096));
    cmd->add_option("--epochs", t.epochs, "passes over the positions")
        ->capture_default_str()
        ->check(CLI::Range(1, 100));
    cmd->add_option("--batch", t.batch, "positions per Adam step")
        ->capture_default_str()
        ->check(CLI::Range(1, 1024));
    cmd->add_option("--lr", t.lr, "Adam's learning rate")
        ->capture_default_str()
        ->check(CLI::Range(1e-7, 1.0));
    cmd->add_option("--seed", t.seed, "the shuffling of positions")->capture_default_str();
    cmd->add_option("-t,--threads", o->threads, "threads (default: physical cores)");
    cmd->add_flag("--json", o->json, "print the report as JSON");
    cmd->add_flag("-q,--quiet", o->quiet, "no progress");
    cmd->callback([o] { train_medusa(*o); });
}

}  // namespace ferry::cli
