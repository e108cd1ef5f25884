// `ferry bench`: measured numbers people compare. `bench decode` times one stream (prefill of a
// prompt, then decode) and sets it against this machine's roofline: decode cannot beat
// read bandwidth / weight bytes per token.
#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/bench_plot.h"
#include "cli/commands.h"
#include "cli/kv_options.h"
#include "cli/model_options.h"
#include "cli/spec_options.h"
#include "comm/communicator.h"
#include "core/progress.h"
#include "engine/generator.h"
#include "engine/lookahead_proposer.h"
#include "model/moe.h"
#include "plan/bottleneck.h"
#include "plan/roofline.h"

namespace ferry::cli {
namespace {

struct DecodeBenchOptions {
    ModelOptions model;
    SpecOptions spec;
    KvDTypeOption kv_dtype;
    SampleOnOption sample_on;
    int prompt_tokens = 128;
    std::string prompt_file;
    bool chat = false;
    int gen_tokens = 64;
    int repeats = 3;
    bool json = false;
    std::string plot;
};

struct Summary {
    double median = 0, min = 0, max = 0;
};
Summary summarize(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return {n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2, v.front(), v.back()};
}

// The tensor type holding most of the weight bytes ("q4_1" for the default model), or the
// type the weights were rounded to as they loaded.
std::string dominant_weight_type(const engine::LoadedModel& lm) {
    if (lm.loaded_as) return std::string(dtype_name(*lm.loaded_as));
    const auto types = lm.weights->stored_types();
    return std::max_element(types.begin(), types.end(),
                            [](auto& a, auto& b) { return a.second.bytes < b.second.bytes; })
        ->first;
}

std::vector<int32_t> bench_prompt(const DecodeBenchOptions& o, const engine::LoadedModel& lm,
                                  int ctx) {
    std::vector<int32_t> ids;
    if (!o.prompt_file.empty()) {
        const std::string text = read_file_or_exit(o.prompt_file);
        if (o.chat) {
            if (!lm.chat_template) throw ExitError(lm.chat_template_error);
            ids = lm.tokenizer->encode(take(lm.chat_template->apply({{"user", text}}, true)), false,
                                       true);
        } else {
            ids = lm.tokenizer->encode(text, true, false);
        }
    } else if (lm.model->config().is_moe()) {
        // A mixture's prefill costs what its tokens' spread over the experts costs: a repeated
        // sentence would route them to a few. Seeded uniform ids spread them, as llama-bench's
        // random prompts do.
        uint64_t x = 0x9e3779b97f4a7c15ull;
        while (static_cast<int>(ids.size()) < o.prompt_tokens) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            ids.push_back(static_cast<int32_t>((x >> 33) % lm.model->config().n_vocab));
        }
    } else {
        // A synthetic prompt of ordinary text tokens: the cost of a dense model's prefill does
        // not depend on which tokens they are, only on how many.
        const auto base = lm.tokenizer->encode(
            "The quick brown fox jumps over the lazy dog while the engine measures itself. ", false,
            false);
        while (static_cast<int>(ids.size()) < o.prompt_tokens)
            ids.push_back(base[ids.size() % base.size()]);
    }
    if (static_cast<int>(ids.size()) + o.gen_tokens > ctx)
        throw ExitError(fmt::format("prompt ({}) + generated ({}) tokens exceed the context of {}",
                                    ids.size(), o.gen_tokens, ctx));
    return ids;
}

void bench_decode(const DecodeBenchOptions& o) {
    engine::LoadedModel lm = o.model.load(!o.json);
    const int threads = o.model.resolved_threads();
    // A benchmark sizes its cache to what it runs, so the usual 4096 cap does not apply; the
    // model's trained context, or an explicit --ctx, does.
    const int trained = lm.model->config().n_ctx_train;
    const int ctx = o.model.ctx > 0 ? o.model.ctx
                    : trained > 0   ? trained
                                    : std::numeric_limits<int>::max();
    auto prompt = bench_prompt(o, lm, ctx);
    const int run_ctx = static_cast<int>(prompt.size()) + o.gen_tokens;

    if (!o.json)
        std::fprintf(stderr, "measuring this machine's read bandwidth and peak FLOP/s ...\n");
    // Sampled again after every measured run and the median taken: on a shared machine the
    // bandwidth at hand moves from one second to the next, and the roofline should describe
    // the moments the runs saw, not one probe before them.
    std::vector<double> bw_samples{lm.backend->measure_read_bandwidth_gbs()};
    const double peak_gflops = lm.backend->measure_peak_gflops_f32();

    engine::Generator gen(*lm.model, lm.backend, run_ctx, o.kv_dtype.format(lm));
    gen.set_sample_on(o.sample_on.resolved());
    engine::SamplingParams greedy;
    greedy.temperature = 0;
    // With speculation, every repeat runs plain decoding and speculation back to back (A B A B),
    // so the speed-up is a ratio measured under the same conditions, and the two outputs are
    // compared token for token (greedy speculation must not change them).
    const auto spec_cfg = o.spec.resolved();
    const auto draft = o.spec.load_draft(!o.json, lm.backend);
    auto proposer = o.spec.make(lm, draft ? &*draft : nullptr, run_ctx, o.kv_dtype.resolved());
    const bool speculate = proposer != nullptr;
    std::vector<double> prefill, decode, ttft, tpot, base_decode, speedup;
    int64_t spec_steps = 0, spec_drafted = 0, spec_accepted = 0, spec_declined = 0;
    std::vector<int> trace_drafted, trace_accepted;  // the last measured run's, step by step
    bool identical = true;
    Progress bar("bench decode", (o.repeats + 1) * (speculate ? 2 : 1), !o.json);
    int done = 0;
    // Under --tp / --pp, what rank 0 exchanged during a run's decode: from its first token
    // (the prefill's) to its end.
    comm::Communicator* const comm = lm.model->comm();
    comm::CommStats comm_first, comm_decode;
    int64_t comm_decode_tokens = 0;
    auto once = [&](const engine::SpecRun& sr, std::vector<int32_t>* out) {
        gen.reset();
        auto st = take(gen.generate(
            prompt, greedy, o.gen_tokens,
            [&](int32_t t) {
                out->push_back(t);
                if (comm && out->size() == 1) comm_first = lm.model->comm_stats();
                return true;
            },
            nullptr, sr));
        bar.update(++done);
        return st;
    };
    auto add_decode_comm = [&](const std::vector<int32_t>& out) {
        if (!comm || out.size() < 2) return;
        comm_decode += lm.model->comm_stats() - comm_first;
        comm_decode_tokens += static_cast<int64_t>(out.size()) - 1;
    };
    for (int r = 0; r <= o.repeats; ++r) {  // run 0 warms caches and is not counted
        if (r == 1) lm.model->reset_expert_tokens();
        std::vector<int32_t> plain_out, spec_out;
        engine::GenerationStats base{};
        if (speculate) base = once({}, &plain_out);
        auto st = once({proposer.get(), spec_cfg.k, spec_cfg.policy}, &spec_out);
        if (speculate && plain_out != spec_out) identical = false;
        if (r == 0) continue;
        add_decode_comm(spec_out);
        bw_samples.push_back(lm.backend->measure_read_bandwidth_gbs());
        prefill.push_back(st.prefill_tokens_per_s());
        decode.push_back(st.decode_tokens_per_s());
        ttft.push_back(st.ttft_ms);
        tpot.push_back(st.decode_tokens_per_s() > 0 ? 1e3 / st.decode_tokens_per_s() : 0);
        if (speculate) {
            base_decode.push_back(base.decode_tokens_per_s());
            speedup.push_back(base.decode_tokens_per_s() > 0
                                  ? st.decode_tokens_per_s() / base.decode_tokens_per_s()
                                  : 0);
            spec_steps += st.spec_steps;
            spec_drafted += st.spec_draft_tokens;
            spec_accepted += st.spec_accepted_tokens;
            spec_declined += st.spec_declined_steps;
            trace_drafted = st.spec_step_drafted;
            trace_accepted = st.spec_step_accepted;
        }
    }
    bar.finish();

    const Summary bws = summarize(bw_samples);
    const double bw = bws.median;
    const double wbytes = static_cast<double>(lm.model->weight_bytes_per_token(*lm.backend));
    const double roofline = bw * 1e9 / wbytes;
    const Summary pf = summarize(prefill), dc = summarize(decode), tt = summarize(ttft),
                  tp = summarize(tpot);
    nlohmann::json j = {
        {"model", lm.path},
        {"weight_type", dominant_weight_type(lm)},
        {"threads", threads},
        {"cpu_level", backend_property(*lm.backend, "cpu_level")},
        {"activations", kernels::activations_name(lm.backend->activations())},
        {"prompt_tokens", prompt.size()},
        {"gen_tokens", o.gen_tokens},
        {"repeats", o.repeats},
        {"prefill_tokens_per_s", pf.median},
        {"decode_tokens_per_s", dc.median},
        {"ttft_ms", tt.median},
        {"tpot_ms", tp.median},
        {"weight_bytes_per_token", wbytes},
        {"read_bandwidth_gbs", bw},
        {"roofline_decode_tokens_per_s", roofline},
        {"roofline_fraction", dc.median / roofline},
        {"kv_dtype", quant::kv_dtype_name(gen.kv_store().dtype())},
    };
    // Where each phase sits under the roofline (plan/bottleneck): bytes and FLOPs per token
    // from the model's size, time from the medians above.
    const int64_t params = lm.model->active_parameter_count();
    // The cache's real bytes (scales included; 256-slot blocks make the padding negligible).
    const double kv_per_token =
        static_cast<double>(gen.kv_store().bytes_per_block()) / gen.kv_store().block_size();
    const auto pre_cost = plan::prefill_cost(params, wbytes, static_cast<int64_t>(prompt.size()));
    const auto dec_cost = plan::decode_step_cost(
        params, wbytes, kv_per_token, 1, static_cast<int64_t>(prompt.size()) + o.gen_tokens / 2);
    const plan::BottleneckReport phases[] = {
        plan::analyze_bottleneck({"prefill", pre_cost.bytes, pre_cost.flops,
                                  pf.median > 0 ? double(prompt.size()) / pf.median : 0, bw,
                                  peak_gflops}),
        plan::analyze_bottleneck(
            {"decode", dec_cost.bytes, dec_cost.flops, tp.median / 1e3, bw, peak_gflops}),
    };
    j["peak_gflops"] = peak_gflops;
    j["kv_bytes_per_token"] = kv_per_token;
    // A decode step also reads the keys and values of every position so far: at long contexts
    // that is a real share of the bytes, so the bound that counts it is reported beside the
    // weights-only one.
    const double kv_read = kv_per_token * (static_cast<double>(prompt.size()) + o.gen_tokens / 2.0);
    const double roofline_kv = bw * 1e9 / (wbytes + kv_read);
    j["kv_bytes_read_per_token"] = kv_read;
    j["roofline_with_kv_tokens_per_s"] = roofline_kv;
    j["roofline_with_kv_fraction"] = dc.median / roofline_kv;
    if (gen.kv_store().dtype() == quant::KvDType::Int8)
        j["kv_k_clipped"] = gen.kv_store().k_clipped();
    j["sample_on"] = o.sample_on.name;
    j["spec_method"] = engine::spec_method_name(spec_cfg.method);
    if (speculate) {
        j["spec_k"] = spec_cfg.k;
        if (spec_cfg.method == engine::SpecMethod::Medusa)
            j["spec_medusa_tree"] = spec_cfg.medusa_tree;
        j["spec_tree"] = proposer->drafts_trees();
        j["spec_policy"] = engine::spec_policy_name(spec_cfg.policy);
        j["spec_steps"] = spec_steps;
        j["spec_declined_steps"] = spec_declined;
        j["spec_acceptance_rate"] = spec_drafted ? double(spec_accepted) / double(spec_drafted) : 0;
        j["spec_mean_accepted"] = spec_steps ? double(spec_accepted) / double(spec_steps) : 0;
        j["baseline_decode_tokens_per_s"] = summarize(base_decode).median;
        j["spec_speedup"] = summarize(speedup).median;
        j["spec_output_identical"] = identical;
        // The step costs the policy planned with: a pass of 1..K + 1 tokens, as measured.
        nlohmann::json costs = nlohmann::json::array();
        const auto& cm = gen.spec_planner().cost();
        for (int n = 1; n <= spec_cfg.k + 1; ++n)
            if (cm.measured(n)) costs.push_back({{"tokens", n}, {"ms", *cm.estimate(n) * 1e3}});
        j["spec_step_ms"] = costs;
        j["spec_trace"] = {{"drafted", trace_drafted}, {"accepted", trace_accepted}};
        if (auto* la = dynamic_cast<const engine::LookaheadProposer*>(proposer.get())) {
            // Which of lookahead's sources drafted the verified tokens, and how many were kept.
            const auto& ss = la->stats();
            for (auto [src, name] : {std::pair{engine::LookaheadProposer::kLookup, "lookup"},
                                     std::pair{engine::LookaheadProposer::kPool, "pool"},
                                     std::pair{engine::LookaheadProposer::kJacobi, "jacobi"}})
                j["lookahead_sources"][name] = {{"verified", ss.drafted[src]},
                                                {"reached", ss.reached[src]},
                                                {"accepted", ss.accepted[src]}};
        }
    }
    for (const auto& ph : phases) j["bottleneck"][ph.phase] = ph.to_json();
    if (comm && comm_decode_tokens > 0) {
        // Per generated token of the measured runs' decode, as rank 0 saw it (its waits for a
        // slower rank are in the seconds).
        const double per = 1.0 / static_cast<double>(comm_decode_tokens);
        const double ms = comm_decode.seconds() * 1e3 * per;
        auto kind = [&](const comm::CommStats::Kind& k) {
            return nlohmann::json{{"calls", static_cast<double>(k.calls) * per},
                                  {"bytes", static_cast<double>(k.bytes) * per},
                                  {"ms", k.seconds * 1e3 * per}};
        };
        const bool by_layers = lm.model->pipeline_stages() > 1;
        const bool within = lm.model->tensor_ranks() > 1;
        j["parallel"] = {{"kind", by_layers && within ? "tp+pp"
                                  : by_layers         ? "pp"
                                                      : "tp"},
                         {"ranks", comm->size()},
                         {"decode_per_token",
                          {{"sums", kind(comm_decode.sums)},
                           {"gathers", kind(comm_decode.gathers)},
                           {"stages", kind(comm_decode.stages)},
                           {"steps", kind(comm_decode.steps)},
                           {"comm_ms", ms},
                           {"comm_fraction", tp.median > 0 ? ms / tp.median : 0}}}};
    }
    const model::ExpertLoad load =
        model::expert_load(lm.model->config(), lm.model->expert_tokens());
    if (load.n_expert) j["experts"] = load.to_json();
    for (auto [key, s] :
         {std::pair{"prefill_tokens_per_s", pf}, std::pair{"decode_tokens_per_s", dc},
          std::pair{"ttft_ms", tt}, std::pair{"tpot_ms", tp}})
        j["range"][key] = {{"median", s.median}, {"min", s.min}, {"max", s.max}};
    j["range"]["read_bandwidth_gbs"] = {{"median", bws.median}, {"min", bws.min}, {"max", bws.max}};
    j["bench"] = "decode";
    // On a GPU: graphs on or off, and how many steps replayed one (the CPU has no such line).
    if (const std::string g = backend_property(*lm.backend, "cuda_graphs"); !g.empty())
        j["cuda_graphs"] = g;
    if (!o.plot.empty()) write_plot(j, o.plot);
    if (o.json) {
        std::printf("%s\n", j.dump(2).c_str());
        return;
    }
    std::printf("model      %s (%s), %d threads, %s kernels, %s activations\n", lm.path.c_str(),
                j["weight_type"].get<std::string>().c_str(), threads,
                backend_property(*lm.backend, "cpu_level").c_str(),
                kernels::activations_name(lm.backend->activations()));
    if (j.contains("cuda_graphs"))
        std::printf("graphs     %s\n", j["cuda_graphs"].get<std::string>().c_str());
    std::printf("workload   %zu prompt tokens, %d generated, median of %d runs [min .. max]\n",
                prompt.size(), o.gen_tokens, o.repeats);
    std::printf("prefill    %8.1f tok/s  [%.1f .. %.1f]   ttft %.1f ms\n", pf.median, pf.min,
                pf.max, tt.median);
    std::printf("decode     %8.1f tok/s  [%.1f .. %.1f]   tpot %.2f ms\n", dc.median, dc.min,
                dc.max, tp.median);
    if (load.n_expert)
        std::printf(
            "experts    %d of %d per token; tokens per expert over the measured runs: mean %.1f, "
            "min %lld, max %lld (busiest / mean %.2f; worst layer's %.2f)\n",
            load.n_used, load.n_expert, load.mean, static_cast<long long>(load.min),
            static_cast<long long>(load.max), load.imbalance, load.worst_layer_imbalance);
    if (j.contains("parallel")) {
        const auto& d = j["parallel"]["decode_per_token"];
        std::string kinds;
        for (const char* k : {"sums", "gathers", "stages", "steps"})
            if (d[k]["calls"].get<double>() > 0)
                kinds += fmt::format("{}{:.0f} {} ({:.0f} bytes, {:.3f} ms)",
                                     kinds.empty() ? "" : ", ", d[k]["calls"].get<double>(), k,
                                     d[k]["bytes"].get<double>(), d[k]["ms"].get<double>());
        std::printf(
            "parallel   %s over %d ranks, rank 0 per decoded token: %s; %.3f ms in all = %.0f %% "
            "of the step\n",
            j["parallel"]["kind"].get<std::string>().c_str(), comm->size(), kinds.c_str(),
            d["comm_ms"].get<double>(), 100 * d["comm_fraction"].get<double>());
    }
    std::printf("kv cache   %s, %.0f bytes per token\n",
                quant::kv_dtype_name(gen.kv_store().dtype()), kv_per_token);
    std::printf(
        "roofline   %.1f GB/s read [%.1f .. %.1f] / %.1f MiB per token = %.1f tok/s; "
        "decode at %.0f %%\n",
        bw, bws.min, bws.max, wbytes / 1048576.0, roofline, 100.0 * dc.median / roofline);
    std::printf(
        "           with the KV cache read at the mean context (+%.1f MiB): %.1f tok/s; "
        "decode at %.0f %%\n",
        kv_read / 1048576.0, roofline_kv, 100.0 * dc.median / roofline_kv);
    for (const auto& ph : phases)
        std::printf("bound      %s (%.1f GB/s, %.1f GFLOP/s achieved)\n", ph.sentence.c_str(),
                    ph.achieved_gbs, ph.achieved_gflops);
    if (speculate)
        std::printf(
            "speculate  %s, %s (%s): %.2fx plain decoding (%.1f tok/s), %.0f %% of drafts "
            "accepted, %.2f per step, %lld steps declined; output %s\n",
            engine::spec_method_name(spec_cfg.method),
            (proposer->own_budget()     ? fmt::format("trees of {}", proposer->max_draft())
             : proposer->drafts_trees() ? fmt::format("trees of k {}", spec_cfg.k)
                                        : fmt::format("k {}", spec_cfg.k))
                .c_str(),
            engine::spec_policy_name(spec_cfg.policy), j["spec_speedup"].get<double>(),
            j["baseline_decode_tokens_per_s"].get<double>(),
            100 * j["spec_acceptance_rate"].get<double>(), j["spec_mean_accepted"].get<double>(),
            static_cast<long long>(spec_declined),
            identical ? "identical to plain decoding" : "DIFFERS from plain decoding");
}

}  // namespace

void add_bench_command(CLI::App& app) {
    CLI::App* bench = app.add_subcommand("bench", "benchmarks: measured, comparable numbers");
    bench->require_subcommand(1);
    auto o = std::make_shared<DecodeBenchOptions>();
    CLI::App* dec = bench->add_subcommand("decode", "one stream: prefill then decode, vs roofline");
    o->model.add_to(*dec);
    auto* p = dec->add_option("-p,--prompt-tokens", o->prompt_tokens, "synthetic prompt length")
                  ->capture_default_str()
                  ->check(CLI::Range(1, 1 << 20));
    auto* pf = dec->add_option("--prompt-file", o->prompt_file, "use this text as the prompt")
                   ->excludes(p);
    dec->add_option("-n,--gen-tokens", o->gen_tokens, "tokens to generate")
        ->capture_default_str()
        ->check(CLI::Range(2, 1 << 20));
    dec->add_option("-r,--repeats", o->repeats, "measured runs (after one warm-up)")
        ->capture_default_str()
        ->check(CLI::Range(1, 1000));
    dec->add_flag("--chat", o->chat, "wrap --prompt-file in the model's chat template")->needs(pf);
    o->kv_dtype.add_to(*dec);
    o->sample_on.add_to(*dec);
    o->spec.add_to(*dec, false);
    dec->add_flag("--json", o->json, "print JSON with stable keys");
    add_plot_option(*dec, o->plot);
    dec->callback([o] { bench_decode(*o); });
    add_bench_throughput_command(*bench);
    add_bench_serve_command(*bench);
}

}  // namespace ferry::cli
