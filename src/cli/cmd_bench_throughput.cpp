// `ferry bench throughput`: an offline workload through the serving engine (many requests,
// lengths fixed or drawn, optional shared prefix, Poisson or all-at-once arrivals). --compare
// runs the same workload under each baseline switch and prints one table.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>

#include "cli/bench_plot.h"
#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/latency_slo.h"
#include "cli/model_options.h"
#include "core/progress.h"
#include "model/moe.h"
#include "plan/bottleneck.h"
#include "server/structured_output.h"

namespace ferry::cli {
namespace {

struct Range {
    int lo = 0, hi = 0;
};

Range parse_range(const std::string& s, const char* what) {
    // Whole strings of digits only: std::stoi would take "4x" as 4 and "7-20-99" as 7-20.
    const auto bad = [&] {
        return ExitError(fmt::format("{} must be N or LO-HI, got '{}'", what, s));
    };
    const auto number = [&](std::string_view t) {
        int v = 0;
        const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
        if (t.empty() || !std::isdigit(static_cast<unsigned char>(t[0])) || ec != std::errc() ||
            end != t.data() + t.size())
            throw bad();
        return v;
    };
    Range r;
    const std::string_view v = s;
    const auto dash = v.find('-');
    r.lo = number(v.substr(0, dash));
    r.hi = dash == std::string_view::npos ? r.lo : number(v.substr(dash + 1));
    if (r.lo < 1 || r.hi < r.lo)
        throw ExitError(fmt::format("{} must be N or LO-HI with 1 <= LO <= HI, got '{}'", what, s));
    return r;
}

struct ThroughputOptions {
    ModelOptions model;
    EngineOptions engine;
    int num_prompts = 64;
    std::string input_len = "32-512";
    std::string output_len = "16-256";
    std::string dataset;
    int shared_prefix_len = 0;
    std::string request_rate = "inf";
    uint64_t seed = 0;
    // Greedy unless a temperature is given; then OpenAI-style plain sampling (vLLM's throughput
    // benchmark samples at temperature 1, top-p 1), one seeded stream per request.
    float temperature = 0;
    int top_k = 0;
    float top_p = 1;
    LatencySlo slo;
    double high_priority_fraction = 0;  // of requests, at priority -1 (the rest at 0)
    bool compare = false;
    bool vs_unconstrained = false;
    std::string plot;
    bool json = false;
};

struct Item {
    std::vector<int32_t> prompt;
    int output_len;
    double arrival_s;
    // A dataset line's response_format (or guided_json, grammar, ...), compiled.
    std::shared_ptr<const grammar::CompiledGrammar> grammar;
    int priority = 0;
};

// What compiling the workload's distinct constraints cost (each is compiled once).
struct CompileCost {
    int grammars = 0;
    double total_s = 0, max_s = 0;
};
CompileCost g_compile;

// The distinct grammars a workload uses, for their mask statistics.
std::vector<const grammar::CompiledGrammar*> grammars_of(const std::vector<Item>& items) {
    std::vector<const grammar::CompiledGrammar*> out;
    for (const auto& it : items)
        if (it.grammar && std::find(out.begin(), out.end(), it.grammar.get()) == out.end())
            out.push_back(it.grammar.get());
    return out;
}

// Their mask statistics added up.
grammar::CompiledGrammar::Stats summed_stats(
    const std::vector<const grammar::CompiledGrammar*>& grammars) {
    grammar::CompiledGrammar::Stats sum;
    for (const auto* g : grammars) {
        const auto s = g->stats();
        sum.computed += s.computed, sum.hits += s.hits, sum.compute_s += s.compute_s;
        sum.tops_computed += s.tops_computed, sum.tops_derived += s.tops_derived;
        sum.tops_shared += s.tops_shared;
        sum.max_s = std::max(sum.max_s, s.max_s);
    }
    return sum;
}

std::vector<Item> make_workload(const ThroughputOptions& o, const engine::LoadedModel& lm,
                                int max_len) {
    std::mt19937_64 rng(o.seed);
    std::vector<Item> items;
    const auto& tok = *lm.tokenizer;
    if (!o.dataset.empty()) {
        std::optional<engine::ConstraintCompiler> compiler;
        // A line without a length of its own draws one from --output-len.
        const Range out = parse_range(o.output_len, "--output-len");
        std::ifstream in = open_or_exit(o.dataset);
        std::string line;
        int line_no = 0;
        while (static_cast<int>(items.size()) < o.num_prompts && std::getline(in, line)) {
            ++line_no;
            if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
            auto bad = [&](const std::string& why) {
                return ExitError(fmt::format("{}: line {}: {}", o.dataset, line_no, why));
            };
            auto j = nlohmann::json::parse(line, nullptr, false);
            if (j.is_discarded() || !j.is_object() ||
                !(j.contains("prompt") || j.contains("messages")))
                throw bad(
                    "each line must be a JSON object with a \"prompt\" string or chat "
                    "\"messages\"");
            std::vector<int32_t> ids;
            int output_len = std::uniform_int_distribution<int>(out.lo, out.hi)(rng);
            try {
                if (j.contains("messages")) {
                    // A chat: rendered through the model's template, as the server would.
                    if (!lm.chat_template) throw ExitError(lm.chat_template_error);
                    std::vector<tokenizer::ChatMessage> msgs;
                    for (const auto& m : j.at("messages"))
                        msgs.push_back(
                            {m.at("role").get<std::string>(), m.at("content").get<std::string>()});
                    ids = tok.encode(take(lm.chat_template->apply(msgs, true)), false, true);
                } else {
                    ids = tok.encode(j["prompt"].get<std::string>(), true, false);
                }
                // vLLM's and SGLang's dataset scripts name the wanted length differently.
                for (const char* key : {"output_len", "output_tokens", "max_tokens"}) {
                    if (!j.contains(key)) continue;
                    const auto& v = j[key];
                    if (!v.is_number_integer() || v.get<int64_t>() < 1)
                        throw bad(fmt::format("\"{}\" must be a positive integer", key));
                    output_len = static_cast<int>(std::min<int64_t>(v.get<int64_t>(), 1 << 24));
                    break;
                }
            } catch (const nlohmann::json::exception& e) {
                throw bad(e.what());
            }
            if (ids.empty()) throw bad("the prompt is empty");
            // A structured-output field, in any dialect the server takes.
            std::string cerr, cparam;
            auto cf = server::parse_constraint(nlohmann::ordered_json::parse(line), cerr, cparam);
            if (!cerr.empty()) throw bad(cerr);
            std::shared_ptr<const grammar::CompiledGrammar> g;
            if (cf) {
                if (!compiler) compiler.emplace(engine::grammar_vocabulary(tok));
                const auto before = compiler->stats();
                auto c = compiler->compile(cf->constraint);
                const auto after = compiler->stats();
                if (after.compiled > before.compiled) {
                    const double s = after.compile_s - before.compile_s;
                    ++g_compile.grammars;
                    g_compile.total_s += s;
                    g_compile.max_s = std::max(g_compile.max_s, s);
                }
                if (!c) throw bad(fmt::format("'{}': {}", cf->param, c.error().message));
                g = *c;
            }
            items.push_back({std::move(ids), output_len, 0, std::move(g)});
        }
        if (items.empty()) throw ExitError(o.dataset + ": no prompts in the file");
        if (static_cast<int>(items.size()) < o.num_prompts)
            std::fprintf(stderr,
                         "bench throughput: %s has %zu prompts; running those (fewer than "
                         "--num-prompts %d)\n",
                         o.dataset.c_str(), items.size(), o.num_prompts);
    } else {
        const Range in = parse_range(o.input_len, "--input-len");
        const Range out = parse_range(o.output_len, "--output-len");
        // Ordinary text tokens (ids of the byte-level merges), so prompts look like text to
        // the model; which ones does not change the cost.
        std::uniform_int_distribution<int32_t> id(300, lm.model->config().n_vocab - 1);
        std::vector<int32_t> prefix(o.shared_prefix_len);
        for (auto& t : prefix) t = id(rng);
        for (int i = 0; i < o.num_prompts; ++i) {
            const int len = std::uniform_int_distribution<int>(in.lo, in.hi)(rng);
            Item it{prefix, std::uniform_int_distribution<int>(out.lo, out.hi)(rng), 0, nullptr};
            while (static_cast<int>(it.prompt.size()) < o.shared_prefix_len + len)
                it.prompt.push_back(id(rng));
            items.push_back(std::move(it));
        }
    }
    int cut = 0;
    for (auto& it : items) {
        if (static_cast<int>(it.prompt.size()) >= max_len) it.prompt.resize(max_len / 2), ++cut;
        it.output_len = std::clamp(it.output_len, 1, max_len - static_cast<int>(it.prompt.size()));
    }
    if (cut)
        std::fprintf(stderr,
                     "bench throughput: note: %d prompt(s) reached the context of %d tokens and "
                     "were cut to %d (raise --ctx)\n",
                     cut, max_len, max_len / 2);
    if (const double rate = parse_request_rate(o.request_rate); rate > 0) {
        std::exponential_distribution<double> gap(rate);
        double t = 0;
        for (auto& it : items) it.arrival_s = (t += gap(rng));
    }
    if (o.high_priority_fraction > 0) {
        std::bernoulli_distribution high(o.high_priority_fraction);
        for (auto& it : items) it.priority = high(rng) ? -1 : 0;
    }
    return items;
}

struct Stats {
    double mean = 0, p50 = 0, p90 = 0, p99 = 0;
};
Stats stats_of(std::vector<double> v) {
    Stats s;
    if (v.empty()) return s;
    std::sort(v.begin(), v.end());
    auto pct = [&](double p) { return v[static_cast<size_t>(std::round(p * (v.size() - 1)))]; };
    for (double x : v) s.mean += x;
    s.mean /= double(v.size());
    s.p50 = pct(0.5), s.p90 = pct(0.9), s.p99 = pct(0.99);
    return s;
}
nlohmann::json to_json(const Stats& s) {
    return {{"mean", s.mean}, {"p50", s.p50}, {"p90", s.p90}, {"p99", s.p99}};
}

struct Peaks {
    double gbs = 0, gflops = 0;
};

nlohmann::json run_workload(const engine::LoadedModel& lm, const engine::EngineConfig& cfg,
                            const std::vector<Item>& items, const std::string& label, bool quiet,
                            const Peaks& peaks, const LatencySlo& slo,
                            const engine::SamplingParams& sampling,
                            std::vector<int>* out_lens = nullptr) {
    if (out_lens) out_lens->assign(items.size(), 0);
    const std::unique_ptr<engine::Engine> engine_ptr = take(engine::Engine::create(lm, cfg));
    engine::Engine& eng = *engine_ptr;
    static bool noted = false;  // once, also under --json (stderr) and --compare
    if (!std::exchange(noted, true)) note_kv_capped_context(eng, "bench throughput");
    engine::RequestParams base;
    base.sampling = sampling;
    base.ignore_eos = true;
    Progress bar("bench throughput: " + label, static_cast<int64_t>(items.size()), !quiet);
    lm.model->reset_expert_tokens();
    const auto grammars = grammars_of(items);
    const grammar::CompiledGrammar::Stats g0 = summed_stats(grammars);

    const auto t0 = std::chrono::steady_clock::now();
    auto elapsed = [&] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    size_t next = 0, done = 0;
    double waste_sum = 0;
    int64_t waste_steps = 0, peak_blocks = 0, peak_window_blocks = 0, peak_kv_bytes = 0;
    std::vector<engine::RequestMetrics> finished;
    while (done < items.size()) {
        while (next < items.size() && items[next].arrival_s <= elapsed()) {
            auto p = base;
            p.max_tokens = items[next].output_len;
            p.sampling.seed = sampling.seed + next;  // each run of --compare draws the same
            p.sampling.has_seed = true;
            p.grammar = items[next].grammar;
            p.priority = items[next].priority;
            engine::TokenCallback cb;
            if (out_lens)
                cb = [out_lens, i = next](const engine::TokenEvent& ev) {
                    if (ev.finished) (*out_lens)[i] = ev.completion_tokens;
                };
            auto id = eng.add_request(items[next].prompt, p, std::move(cb));
            if (!id) throw ExitError("request refused: " + id.error().message);
            ++next;
        }
        const bool ran = eng.step();
        const auto m = eng.metrics();
        if (ran) {
            waste_sum += m.kv_waste_fraction;
            ++waste_steps;
            peak_blocks = std::max(peak_blocks, m.kv_blocks_used);
            peak_window_blocks = std::max(peak_window_blocks, m.kv_window_blocks_used);
            peak_kv_bytes = std::max(
                peak_kv_bytes, m.kv_blocks_used * static_cast<int64_t>(eng.kv_bytes_per_block()) +
                                   m.kv_window_blocks_used *
                                       static_cast<int64_t>(eng.kv_window_bytes_per_block()));
        } else if (next < items.size()) {
            std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
        for (auto& r : eng.take_finished_metrics()) finished.push_back(std::move(r));
        done = finished.size();
        bar.update(static_cast<int64_t>(done));
    }
    bar.finish();
    const double wall = elapsed();
    const auto m = eng.metrics();
    int64_t in_tok = 0, out_tok = 0;
    std::vector<double> ttft, tpot;
    std::map<int, std::vector<double>> ttft_by_priority, tpot_by_priority;
    int64_t good = 0;
    for (const auto& r : finished) {
        in_tok += r.prompt_tokens;
        out_tok += r.output_tokens;
        ttft.push_back(r.ttft_s * 1e3);
        ttft_by_priority[r.priority].push_back(r.ttft_s * 1e3);
        if (!r.itl_s.empty()) {
            tpot.push_back(r.tpot_s() * 1e3);
            tpot_by_priority[r.priority].push_back(r.tpot_s() * 1e3);
        }
        good += slo.met(r.ttft_s, r.tpot_s());
    }
    // Every step reads all weights once and does 2 x params FLOPs per token it runs.
    const double bytes = double(m.steps) * double(lm.model->weight_bytes_per_token(*lm.backend));
    const double flops =
        2.0 * double(lm.model->active_parameter_count()) * double(m.batched_tokens_total);
    const auto bound =
        plan::analyze_bottleneck({"throughput", bytes, flops, wall, peaks.gbs, peaks.gflops});
    nlohmann::json row = {
        {"label", label},
        {"bottleneck", bound.to_json()},
        {"requests", finished.size()},
        {"duration_s", wall},
        {"requests_per_s", double(finished.size()) / wall},
        {"output_tokens_per_s", double(out_tok) / wall},
        {"total_tokens_per_s", double(in_tok + out_tok) / wall},
        {"ttft_ms", to_json(stats_of(ttft))},
        {"tpot_ms", to_json(stats_of(tpot))},
        {"goodput", double(good) / wall},
        // Every request's, for distributions (--plot).
        {"latencies", {{"ttft_ms", ttft}, {"tpot_ms", tpot}}},
        {"slo_met_fraction", finished.empty() ? 0.0 : double(good) / double(finished.size())},
        {"slo_ttft_ms", slo.ttft_ms},
        {"slo_tpot_ms", slo.tpot_ms},
        {"max_tpot_ms", cfg.max_tpot_ms},
        {"kv_waste_fraction", waste_steps ? waste_sum / double(waste_steps) : 0.0},
        {"peak_kv_blocks", peak_blocks},
        {"kv_blocks_total", m.kv_blocks_total},
        {"peak_kv_window_blocks", peak_window_blocks},
        {"kv_window_blocks_total", m.kv_window_blocks_total},
        {"peak_kv_bytes", peak_kv_bytes},
        {"kv_dtype", quant::kv_dtype_name(cfg.kv_dtype)},
        {"kv_bytes_per_token", eng.kv_bytes_per_token()},
        {"preemptions", m.preemptions},
        {"priority_preemptions", m.priority_preemptions},
        {"kv_blocks_dropped", m.kv_blocks_dropped},
        {"kv_evicted_tokens", m.kv_evicted_tokens},
        {"prefix_hit_fraction",
         m.prefix_query_tokens ? double(m.prefix_hit_tokens) / double(m.prefix_query_tokens) : 0.0},
        {"mean_batch_size", m.steps ? double(m.batched_seqs_total) / double(m.steps) : 0.0},
        {"mean_tokens_per_step", m.steps ? double(m.batched_tokens_total) / double(m.steps) : 0.0},
        {"spec_method", engine::spec_method_name(cfg.spec.method)},
        {"spec_policy", engine::spec_policy_name(cfg.spec.policy)},
        {"spec_steps", m.spec_steps},
        {"spec_declined_steps", m.spec_declined_steps},
        {"spec_draft_tokens", m.spec_draft_tokens},
        {"spec_accepted_tokens", m.spec_accepted_tokens},
        {"spec_acceptance_rate",
         m.spec_draft_tokens ? double(m.spec_accepted_tokens) / double(m.spec_draft_tokens) : 0.0},
        {"spec_mean_accepted",
         m.spec_steps ? double(m.spec_accepted_tokens) / double(m.spec_steps) : 0.0},
    };
    // A mixture's router over the whole run: how evenly the batches' tokens spread.
    const model::ExpertLoad load =
        model::expert_load(lm.model->config(), lm.model->expert_tokens());
    if (load.n_expert) row["experts"] = load.to_json();
    if (ttft_by_priority.size() > 1) {
        nlohmann::json by = nlohmann::json::object();
        for (const auto& [prio, v] : ttft_by_priority)
            by[std::to_string(prio)] = {{"requests", v.size()},
                                        {"ttft_ms", to_json(stats_of(v))},
                                        {"tpot_ms", to_json(stats_of(tpot_by_priority[prio]))}};
        row["by_priority"] = by;
    }
    if (!grammars.empty()) {
        // Masks computed during this run (the rest came from the per-state cache) and what
        // computing them cost, beside the forward passes.
        const grammar::CompiledGrammar::Stats g1 = summed_stats(grammars);
        int64_t constrained = 0;
        for (const auto& it : items) constrained += it.grammar != nullptr;
        row["grammar"] = {{"constrained_requests", constrained},
                          {"masks_computed", g1.computed - g0.computed},
                          {"mask_cache_hits", g1.hits - g0.hits},
                          {"mask_compute_s", g1.compute_s - g0.compute_s},
                          // The longest one mask took (over the grammars' lives, so the
                          // first run's, when masks are new), to set beside a step's time.
                          {"mask_max_ms", g1.max_s * 1e3},
                          // Stack tops walked over the vocabulary; the other masks were
                          // unions of tops already known and a short check.
                          {"top_masks_computed", g1.tops_computed - g0.tops_computed},
                          // Of those, tops inside a bounded string (a link of a repetition
                          // chain) that walked only the tokens long enough to reach the bound.
                          {"top_masks_derived", g1.tops_derived - g0.tops_derived},
                          // Tops found among other grammars' (the same string, number or
                          // date shape in another schema): nothing walked.
                          {"top_masks_shared", g1.tops_shared - g0.tops_shared}};
    }
    return row;
}

void print_row(const nlohmann::json& r) {
    std::printf(
        "%-22s %8.2f %8.2f %10.1f %10.1f %9.1f %9.1f %9.1f %9.1f %8.1f%% %7lld %6llu %7.1f%%\n",
        r["label"].get<std::string>().c_str(), r["requests_per_s"].get<double>(),
        r["goodput"].get<double>(), r["output_tokens_per_s"].get<double>(),
        r["total_tokens_per_s"].get<double>(), r["ttft_ms"]["p50"].get<double>(),
        r["ttft_ms"]["p99"].get<double>(), r["tpot_ms"]["p50"].get<double>(),
        r["tpot_ms"]["p99"].get<double>(), 100 * r["kv_waste_fraction"].get<double>(),
        static_cast<long long>(r["peak_kv_blocks"].get<int64_t>()),
        static_cast<unsigned long long>(r["preemptions"].get<uint64_t>()),
        100 * r["prefix_hit_fraction"].get<double>());
}

void bench_throughput(const ThroughputOptions& o) {
    engine::LoadedModel lm = o.model.load(!o.json);
    const int max_len = o.model.resolved_ctx(lm);
    const auto items = make_workload(o, lm, max_len);
    const auto draft = o.engine.spec.load_draft(!o.json, lm.backend);
    const auto cfg = o.engine.resolved(max_len, draft ? &*draft : nullptr);
    if (!o.json)
        std::fprintf(stderr, "measuring this machine's read bandwidth and peak FLOP/s ...\n");
    const Peaks peaks{lm.backend->measure_read_bandwidth_gbs(),
                      lm.backend->measure_peak_gflops_f32()};

    engine::SamplingParams sampling;
    sampling.temperature = o.temperature;
    sampling.top_k = o.top_k;
    sampling.top_p = o.top_p;
    sampling.min_p = 0;
    sampling.seed = o.seed;

    std::vector<nlohmann::json> rows;
    const bool constrained = !grammars_of(items).empty();
    if (o.vs_unconstrained && !constrained)
        throw ExitError("--vs-unconstrained needs a --dataset whose lines constrain the output");
    if (!o.compare) {
        std::vector<int> lens;
        rows.push_back(run_workload(lm, cfg, items, "as configured", o.json, peaks, o.slo, sampling,
                                    o.vs_unconstrained ? &lens : nullptr));
        if (o.vs_unconstrained) {
            // The same prompts, free, each generating as many tokens as its constrained run
            // did (a grammar ends a reply early), so both runs see the same batches. Then free
            // and constrained once more: the second constrained run finds every mask in its
            // grammars' caches (a service that repeats its schemas), the first computed them
            // (new schemas); each is compared with the free run beside it, as the machine drifts.
            auto free_items = items;
            for (size_t i = 0; i < free_items.size(); ++i) {
                free_items[i].grammar.reset();
                free_items[i].output_len = std::max(1, lens[i]);
            }
            rows.push_back(
                run_workload(lm, cfg, free_items, "unconstrained", o.json, peaks, o.slo, sampling));
            rows.push_back(
                run_workload(lm, cfg, free_items, "unconstrained", o.json, peaks, o.slo, sampling));
            rows.push_back(
                run_workload(lm, cfg, items, "as configured", o.json, peaks, o.slo, sampling));
        }
    } else {
        using C = engine::EngineConfig;
        auto with = [&](auto change) {
            C c = cfg;
            change(c);
            return c;
        };
        rows.push_back(run_workload(lm, with([](C&) {}), items, "continuous+paged+prefix", o.json,
                                    peaks, o.slo, sampling));
        rows.push_back(run_workload(lm, with([](C& c) { c.batching = C::Batching::Static; }), items,
                                    "static batching", o.json, peaks, o.slo, sampling));
        rows.push_back(run_workload(lm, with([](C& c) { c.kv_layout = C::KvLayout::Contiguous; }),
                                    items, "contiguous kv", o.json, peaks, o.slo, sampling));
        rows.push_back(run_workload(lm, with([](C& c) { c.prefix_cache = false; }), items,
                                    "prefix cache off", o.json, peaks, o.slo, sampling));
        if (cfg.kv_dtype != quant::KvDType::F32)
            rows.push_back(run_workload(lm, with([](C& c) { c.kv_dtype = quant::KvDType::F32; }),
                                        items, "f32 kv", o.json, peaks, o.slo, sampling));
        if (cfg.spec.method != engine::SpecMethod::Off)
            rows.push_back(run_workload(lm,
                                        with([](C& c) { c.spec.method = engine::SpecMethod::Off; }),
                                        items, "speculation off", o.json, peaks, o.slo, sampling));
        if (constrained) {
            // The cost of constraining: the same prompts, free.
            auto free_items = items;
            for (auto& it : free_items) it.grammar.reset();
            rows.push_back(
                run_workload(lm, cfg, free_items, "unconstrained", o.json, peaks, o.slo, sampling));
        }
    }
    if (o.vs_unconstrained && !o.compare) {
        auto tpot = [&](size_t i) { return rows[i]["tpot_ms"]["mean"].get<double>(); };
        auto ratio = [&](size_t c, size_t u) { return tpot(u) > 0 ? tpot(c) / tpot(u) : 0.0; };
        rows[0]["label"] = "masks computed";
        rows[3]["label"] = "masks cached";
        if (!o.json)
            std::printf(
                "TPOT constrained / unconstrained: %.3f with the masks computed (%.2f / "
                "%.2f ms), %.3f with them cached (%.2f / %.2f ms)\n",
                ratio(0, 1), tpot(0), tpot(1), ratio(3, 2), tpot(3), tpot(2));
        rows[0]["tpot_ratio_vs_unconstrained"] = ratio(0, 1);
        rows[3]["tpot_ratio_vs_unconstrained"] = ratio(3, 2);
    }
    // The report as JSON (printed with --json, drawn with --plot).
    const bool many = o.compare || o.vs_unconstrained;
    nlohmann::json j = many ? nlohmann::json{{"runs", rows}} : rows.front();
    if (o.vs_unconstrained && !o.compare)
        j["tpot_ratio_vs_unconstrained"] = {
            {"masks_computed", rows[0]["tpot_ratio_vs_unconstrained"]},
            {"masks_cached", rows[3]["tpot_ratio_vs_unconstrained"]}};
    j["model"] = lm.path;
    j["num_prompts"] = items.size();
    // What the prompts came to, after the shared prefix and any cut to the context.
    int64_t lo = std::numeric_limits<int64_t>::max(), hi = 0, sum = 0;
    for (const auto& it : items) {
        const auto n = static_cast<int64_t>(it.prompt.size());
        lo = std::min(lo, n), hi = std::max(hi, n), sum += n;
    }
    j["prompt_len"] = {{"min", lo},
                       {"mean", static_cast<double>(sum) / static_cast<double>(items.size())},
                       {"max", hi}};
    j["shared_prefix_len"] = o.dataset.empty() ? o.shared_prefix_len : 0;
    // The arrivals as drawn: a Poisson sample's rate is the asked one only on average.
    if (!items.empty() && items.back().arrival_s > 0)
        j["offered_request_rate"] = static_cast<double>(items.size()) / items.back().arrival_s;
    j["threads"] = o.model.resolved_threads();
    if (g_compile.grammars)
        j["grammar_compile_ms"] = {{"grammars", g_compile.grammars},
                                   {"mean", 1e3 * g_compile.total_s / g_compile.grammars},
                                   {"max", 1e3 * g_compile.max_s}};
    j["sampling"] = {{"temperature", o.temperature}, {"top_k", o.top_k}, {"top_p", o.top_p}};
    j["bench"] = "throughput";
    if (!o.plot.empty()) write_plot(j, o.plot);
    if (o.json) {
        std::printf("%s\n", j.dump(2).c_str());
        return;
    }
    std::printf("%zu requests, %d threads, max %d seqs, %d tokens/step, block %d, %s\n",
                items.size(), o.model.resolved_threads(), cfg.max_num_seqs,
                cfg.max_num_batched_tokens, cfg.block_size,
                o.temperature > 0 ? fmt::format("sampled at temperature {} (top-k {}, top-p {})",
                                                o.temperature, o.top_k, o.top_p)
                                        .c_str()
                                  : "greedy");
    if (o.slo.ttft_ms > 0 || o.slo.tpot_ms > 0)
        std::printf("goodput: requests per second with TTFT <= %s and TPOT <= %s\n",
                    o.slo.ttft_ms > 0 ? fmt::format("{} ms", o.slo.ttft_ms).c_str() : "any",
                    o.slo.tpot_ms > 0 ? fmt::format("{} ms", o.slo.tpot_ms).c_str() : "any");
    std::printf("%-22s %8s %8s %10s %10s %9s %9s %9s %9s %9s %7s %6s %8s\n", "run", "req/s",
                "goodput", "out tok/s", "tot tok/s", "ttft p50", "ttft p99", "tpot p50", "tpot p99",
                "kv waste", "peak kv", "preem", "prefix");
    for (const auto& r : rows) print_row(r);
    for (const auto& r : rows) {
        if (!r.contains("by_priority")) continue;
        for (const auto& [prio, b] : r["by_priority"].items())
            std::printf(
                "%-22s priority %s: %zu requests, ttft p50 %.1f p99 %.1f ms, tpot p50 "
                "%.1f p99 %.1f ms\n",
                r["label"].get<std::string>().c_str(), prio.c_str(), b["requests"].get<size_t>(),
                b["ttft_ms"]["p50"].get<double>(), b["ttft_ms"]["p99"].get<double>(),
                b["tpot_ms"]["p50"].get<double>(), b["tpot_ms"]["p99"].get<double>());
    }
    for (const auto& r : rows)
        std::printf("%-22s %s\n", r["label"].get<std::string>().c_str(),
                    r["bottleneck"]["summary"].get<std::string>().c_str());
    for (const auto& r : rows)
        if (r["spec_draft_tokens"].get<uint64_t>() > 0)
            std::printf(
                "%-22s speculation (%s): %.0f %% of %llu draft tokens accepted, %.2f per step\n",
                r["label"].get<std::string>().c_str(), r["spec_method"].get<std::string>().c_str(),
                100 * r["spec_acceptance_rate"].get<double>(),
                static_cast<unsigned long long>(r["spec_draft_tokens"].get<uint64_t>()),
                r["spec_mean_accepted"].get<double>());
}

}  // namespace

void add_bench_throughput_command(CLI::App& bench) {
    auto o = std::make_shared<ThroughputOptions>();
    CLI::App* cmd = bench.add_subcommand("throughput", "many requests through the serving engine");
    o->model.add_to(*cmd);
    o->engine.add_to(*cmd);
    cmd->add_option("--num-prompts", o->num_prompts, "requests in the workload")
        ->capture_default_str()
        ->check(CLI::Range(1, 1000000));
    cmd->add_option("--input-len", o->input_len,
                    "each prompt's own tokens after --shared-prefix-len (as vLLM's random "
                    "dataset counts them): N or LO-HI (uniform)")
        ->capture_default_str();
    cmd->add_option("--output-len", o->output_len, "generated tokens: N or LO-HI (uniform)")
        ->capture_default_str();
    cmd->add_option("--dataset", o->dataset,
                    "JSONL of {\"prompt\": text | \"messages\": [{role, content}], "
                    "\"output_len\": N} instead of synthetic prompts (output_tokens or "
                    "max_tokens also name the length; without one it is drawn from "
                    "--output-len; response_format, guided_json, guided_regex, guided_choice, "
                    "grammar or json_schema constrain that request's output as the server's)");
    cmd->add_option("--shared-prefix-len", o->shared_prefix_len,
                    "every prompt starts with the same L tokens, then its --input-len own "
                    "(a prompt is L + input-len long)")
        ->check(CLI::Range(0, 1 << 20));
    cmd->add_option("--request-rate", o->request_rate, "Poisson arrivals per second, or inf")
        ->capture_default_str();
    cmd->add_option("--seed", o->seed, "workload seed")->capture_default_str();
    cmd->add_option("--temperature,--temp", o->temperature,
                    "sample at this temperature (0: greedy); top-k and top-p below, nothing else")
        ->capture_default_str()
        ->check(kFinite & CLI::Range(0.0, 100.0));
    cmd->add_option("--top-k", o->top_k, "with --temperature: keep the k most likely (0: off)")
        ->capture_default_str()
        ->check(CLI::Range(0, 1 << 30));
    cmd->add_option("--top-p", o->top_p, "with --temperature: nucleus mass (1: off)")
        ->capture_default_str()
        ->check(kFinite & CLI::Range(0.0, 1.0));
    o->slo.add_to(*cmd);
    cmd->add_option("--high-priority-fraction", o->high_priority_fraction,
                    "this fraction of the requests (drawn at random) runs at priority -1, the "
                    "rest at 0; the report gives each priority's latencies")
        ->capture_default_str()
        ->check(CLI::Range(0.0, 1.0));
    cmd->add_flag("--compare", o->compare,
                  "run the workload under static batching, contiguous KV and prefix cache off too");
    cmd->add_flag("--vs-unconstrained", o->vs_unconstrained,
                  "with a --dataset that constrains outputs: run it again unconstrained, and "
                  "report the TPOT ratio (the cost of the grammar masks)");
    cmd->add_flag("--json", o->json, "print JSON with stable keys");
    add_plot_option(*cmd, o->plot);
    cmd->callback([o] { bench_throughput(*o); });
}

}  // namespace ferry::cli
