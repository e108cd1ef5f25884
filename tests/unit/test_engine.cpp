// The serving engine against the real default model: batching must not change what a request
// gets, memory must always come back, and the baselines must behave as their names say.
#include <gtest/gtest.h>
#include <condition_variable>
#include <mutex>

#include <map>
#include <random>
#include <regex>

#include "engine/constraint.h"
#include "engine/engine.h"
#include "engine/generator.h"
#include "engine/scheduler.h"
#include "engine_test_util.h"

using namespace ferry::engine;

using namespace ferry::testing;

TEST(Engine, ConcurrentGreedyEqualsOneAtATime) {
    const int n = 32;
    auto prompts = mixed_prompts(n, 1);
    std::vector<RequestParams> params;
    for (int i = 0; i < n; ++i) params.push_back(greedy(4 + i % 9));

    auto together_engine = make_engine(small_config());

    Engine& together = *together_engine;
    auto batched = run_all(together, prompts, params);
    expect_all_free(together);
    EXPECT_GT(together.metrics().batched_seqs_total / double(together.metrics().steps), 4.0);

    auto cfg = small_config();
    cfg.max_num_seqs = 1;
    cfg.prefix_cache = false;
    auto alone_engine = make_engine(cfg);
    Engine& alone = *alone_engine;
    for (int i = 0; i < n; ++i) {
        auto single = run_all(alone, {prompts[i]}, {params[i]});
        ASSERT_EQ(single[0].tokens[0], batched[i].tokens[0]) << "request " << i;
        EXPECT_EQ(single[0].text[0], batched[i].text[0]);
        EXPECT_EQ(batched[i].reason[0], FinishReason::Length);
        EXPECT_EQ(int(batched[i].tokens[0].size()), params[i].max_tokens);
    }
}

TEST(Engine, MatchesSingleStreamGenerator) {
    const auto prompt = model().tokenizer->encode("The capital of France is", true, false);
    Generator gen(*model().model, ferry::testing::cpu_backend(2), 256);
    SamplingParams sp;
    sp.temperature = 0;
    std::vector<int32_t> expected;
    auto st = gen.generate(
        prompt, sp, 12,
        [&](int32_t t) {
            expected.push_back(t);
            return true;
        },
        nullptr);
    ASSERT_TRUE(st.ok());
    auto e_engine = make_engine(small_config());
    Engine& e = *e_engine;
    auto got = run_all(e, {prompt}, {greedy(12)});
    EXPECT_EQ(got[0].tokens[0], expected);
}

// Greedy rows without logprobs or grammar end on the device (Backend::argmax; only ids cross to
// the host), the rest as logits: the tokens are the same either way, and the counter says which
// path each step took.
TEST(Engine, DevicePickedGreedyTokensEqualTheLogitsPath) {
    const int n = 12;
    auto prompts = mixed_prompts(n, 3);
    std::vector<RequestParams> plain, with_logprobs;
    for (int i = 0; i < n; ++i) {
        plain.push_back(greedy(3 + i % 7));
        with_logprobs.push_back(plain.back());
        with_logprobs.back().top_logprobs = 0;  // reads the row: the logits path
    }
    auto ids_engine = make_engine(small_config());
    auto by_ids = run_all(*ids_engine, prompts, plain);
    const auto m = ids_engine->metrics();
    EXPECT_GT(m.id_steps, 0u);
    // Prefill steps that finish no prompt want no token; every step that did took the ids path.
    EXPECT_LE(m.id_steps, m.steps);
    expect_all_free(*ids_engine);

    auto logits_engine = make_engine(small_config());
    auto by_logits = run_all(*logits_engine, prompts, with_logprobs);
    EXPECT_EQ(logits_engine->metrics().id_steps, 0u);
    for (int i = 0; i < n; ++i) ASSERT_EQ(by_ids[i].tokens[0], by_logits[i].tokens[0]) << i;

    // One request that reads its row makes the whole step take the logits path, and the greedy
    // neighbours in it still get the same tokens.
    std::vector<RequestParams> mixed = plain;
    mixed[0] = with_logprobs[0];
    auto mixed_engine = make_engine(small_config());
    auto by_mixed = run_all(*mixed_engine, prompts, mixed);
    for (int i = 0; i < n; ++i) ASSERT_EQ(by_mixed[i].tokens[0], by_ids[i].tokens[0]) << i;
}

namespace {
EngineConfig sampling_on(SampleOn where) {
    auto cfg = small_config();
    cfg.sample_on = where;
    return cfg;
}

// The requests run by an engine that draws on the device (Backend::sample; every step that
// wants tokens got ids) and by one that samples on the host, in that order.
std::pair<std::vector<Collected>, std::vector<Collected>> run_on_each_side(
    const std::vector<std::vector<int32_t>>& prompts, const std::vector<RequestParams>& params) {
    auto device_engine = make_engine(sampling_on(SampleOn::Device));
    auto by_device = run_all(*device_engine, prompts, params);
    EXPECT_GT(device_engine->metrics().id_steps, 0u);
    expect_all_free(*device_engine);
    auto host_engine = make_engine(sampling_on(SampleOn::Host));
    auto by_host = run_all(*host_engine, prompts, params);
    EXPECT_EQ(host_engine->metrics().id_steps, 0u);
    return {std::move(by_device), std::move(by_host)};
}
}  // namespace

// Seeded sampling drawn where the logits are (--sample-on device: Backend::sample, only ids
// cross) gives the texts the host's sampler gives (--sample-on host), for every kind of
// truncation, penalties and biases, with sampled and greedy requests sharing steps; a request
// that reads its row (logprobs) moves its steps to the logits path without changing anyone's
// tokens.
TEST(Engine, DeviceDrawsGiveTheHostSamplersTexts) {
    const int n = 10;
    auto prompts = mixed_prompts(n, 5);
    std::vector<RequestParams> params;
    for (int i = 0; i < n; ++i) {
        RequestParams p = greedy(6 + i % 5);
        SamplingParams& s = p.sampling;
        s.temperature = 0.6f + 0.1f * static_cast<float>(i);
        s.seed = 100 + static_cast<uint64_t>(i);
        s.has_seed = true;
        s.top_k = i % 3 == 0 ? 0 : 40;
        s.top_p = i % 4 == 1 ? 1.0f : 0.9f;
        s.min_p = i % 2 ? 0.05f : 0.0f;
        if (i % 5 == 2) s.top_k = 0, s.top_p = 1.0f, s.min_p = 0.0f;  // untruncated
        if (i % 3 == 1) s.repetition_penalty = 1.2f, s.frequency_penalty = 0.3f;
        if (i == 4) s.logit_bias = {{13, 5.0f}, {28, -100.0f}};
        if (i == 9) s.temperature = 0;  // greedy beside the draws
        params.push_back(p);
    }
    auto [by_device, by_host] = run_on_each_side(prompts, params);
    int differs_from_greedy = 0;
    auto greedy_engine = make_engine(small_config());
    std::vector<RequestParams> greedy_params;
    for (int i = 0; i < n; ++i) greedy_params.push_back(greedy(params[i].max_tokens));
    auto by_greedy = run_all(*greedy_engine, prompts, greedy_params);
    for (int i = 0; i < n; ++i) {
        ASSERT_EQ(by_device[i].tokens[0], by_host[i].tokens[0]) << "request " << i;
        differs_from_greedy += by_host[i].tokens[0] != by_greedy[i].tokens[0];
    }
    EXPECT_GE(differs_from_greedy, n / 2);  // the seeds really sampled

    std::vector<RequestParams> mixed = params;
    mixed[3].top_logprobs = 2;
    auto mixed_engine = make_engine(sampling_on(SampleOn::Device));
    auto by_mixed = run_all(*mixed_engine, prompts, mixed);
    for (int i = 0; i < n; ++i)
        ASSERT_EQ(by_mixed[i].tokens[0], by_host[i].tokens[0]) << "request " << i;
}

// A constrained request's draws on the device take its grammar's allowed tokens along as a
// mask: the same seeded texts as the host's masked sampler, every finished one in the grammar,
// greedy and sampled requests side by side.
TEST(Engine, DeviceDrawsKeepToTheGrammarAsTheHostDoes) {
    Constraint c;
    c.kind = Constraint::Kind::Regex;
    c.text = R"([a-z]{2,12}@[a-z]{2,10}\.(com|org))";
    ConstraintCompiler compiler(grammar_vocabulary(*model().tokenizer));
    auto grammar = compiler.compile(c);
    ASSERT_TRUE(grammar.ok()) << grammar.error().message;
    const int n = 6;
    auto prompts = mixed_prompts(n, 9);
    std::vector<RequestParams> params;
    for (int i = 0; i < n; ++i) {
        RequestParams p = greedy(24);
        p.grammar = *grammar;
        SamplingParams& s = p.sampling;
        s.temperature = i == 0 ? 0.0f : 1.1f;
        s.top_k = i % 2 ? 0 : 40;
        s.top_p = i == 3 ? 0.9f : 1.0f;
        s.min_p = 0.0f;
        s.seed = 7 + static_cast<uint64_t>(i);
        s.has_seed = true;
        params.push_back(p);
    }
    auto [by_device, by_host] = run_on_each_side(prompts, params);
    const std::regex email(c.text);
    int finished = 0;
    for (int i = 0; i < n; ++i) {
        ASSERT_EQ(by_device[i].tokens[0], by_host[i].tokens[0]) << "request " << i;
        if (by_device[i].reason[0] == FinishReason::Stop) {
            ++finished;
            EXPECT_TRUE(std::regex_match(by_device[i].text[0], email)) << by_device[i].text[0];
        }
    }
    EXPECT_GT(finished, n / 2);
}

// Log-probabilities streamed with a token are the model's log-softmax, computed here in
// double from the Generator's logits for the same prompt (and the top list is its best k).
TEST(Engine, LogprobsAreTheModelsLogSoftmax) {
    const auto prompt = model().tokenizer->encode("The capital of France is", true, false);
    Generator gen(*model().model, ferry::testing::cpu_backend(2), 256);
    auto logits = gen.logits_for(prompt);
    ASSERT_TRUE(logits.ok());
    const std::vector<float>& l = *logits;
    double mx = l[0];
    for (float x : l) mx = std::max(mx, double(x));
    double z = 0;
    for (float x : l) z += std::exp(double(x) - mx);
    const double lse = mx + std::log(z);

    auto e_engine = make_engine(small_config());

    Engine& e = *e_engine;
    RequestParams p = greedy(1);
    p.top_logprobs = 3;
    std::vector<TokenEvent> events;
    auto id = e.add_request(prompt, p, [&](const TokenEvent& ev) {
        if (ev.token >= 0) events.push_back(ev);
    });
    ASSERT_TRUE(id.ok());
    while (e.has_work()) e.step();
    ASSERT_EQ(events.size(), 1u);
    const TokenEvent& ev = events[0];
    EXPECT_NEAR(ev.logprob, l[ev.token] - lse, 1e-4);
    ASSERT_EQ(ev.top_logprobs.size(), 3u);
    EXPECT_EQ(ev.top_logprobs[0].token, ev.token);  // greedy: the best one
    for (const auto& [tok, lp] : ev.top_logprobs) EXPECT_NEAR(lp, l[tok] - lse, 1e-4);
    EXPECT_GE(ev.top_logprobs[0].logprob, ev.top_logprobs[1].logprob);
    EXPECT_GE(ev.top_logprobs[1].logprob, ev.top_logprobs[2].logprob);
}

// Prompt logprobs (echo with logprobs, vLLM's prompt_logprobs) are, for each prompt token, the
// log-softmax of the single-stream Generator's logits for the prefix before it: whatever the
// chunking, with the prompt already in the prefix cache, under preemption, and for every one
// of n completions. max_tokens 0 scores the prompt and ends.
TEST(Engine, PromptLogprobsAreEachPrefixsLogSoftmax) {
    const auto prompt = model().tokenizer->encode(
        "Ferries cross the strait at dawn, carrying trucks.", true, false);
    ASSERT_GT(prompt.size(), 8u);
    Generator gen(*model().model, ferry::testing::cpu_backend(2), 256);
    std::vector<double> want;  // want[i - 1]: prompt token i's
    std::vector<int32_t> want_best;
    for (size_t i = 1; i < prompt.size(); ++i) {
        auto l = gen.logits_for({prompt.begin(), prompt.begin() + static_cast<long>(i)});
        ASSERT_TRUE(l.ok());
        double mx = -1e30, z = 0;
        for (float x : *l) mx = std::max(mx, double(x));
        for (float x : *l) z += std::exp(double(x) - mx);
        want.push_back((*l)[prompt[i]] - mx - std::log(z));
        want_best.push_back(
            static_cast<int32_t>(std::max_element(l->begin(), l->end()) - l->begin()));
    }
    auto check = [&](const TokenEvent& ev, const char* what) {
        ASSERT_TRUE(ev.prompt_logprobs) << what;
        const PromptLogprobs& got = *ev.prompt_logprobs;
        ASSERT_EQ(got.size(), want.size()) << what;
        for (size_t k = 0; k < got.size(); ++k) {
            EXPECT_NEAR(got[k].logprob, want[k], 2e-3) << what << " token " << k + 1;
            ASSERT_EQ(got[k].top.size(), 2u);
            EXPECT_EQ(got[k].top[0].token, want_best[k]) << what << " token " << k + 1;
            EXPECT_EQ(got[k].rank == 1, prompt[k + 1] == want_best[k]) << what;
        }
    };
    auto cfg = small_config();
    cfg.max_num_batched_tokens = 5;  // the prompt runs in chunks
    auto e_engine = make_engine(cfg);
    Engine& e = *e_engine;
    run_all(e, {prompt}, {greedy(2)});  // now the prompt is in the prefix cache
    RequestParams p = greedy(3);
    p.prompt_logprobs = 2;
    p.n = 3;
    std::map<int, TokenEvent> firsts;
    int events = 0;
    ASSERT_TRUE(e.add_request(prompt, p, [&](const TokenEvent& ev) {
                     if (!firsts.count(ev.index)) firsts[ev.index] = ev;
                     events += ev.prompt_logprobs != nullptr;
                 }).ok());
    while (e.has_work()) e.step();
    ASSERT_EQ(firsts.size(), 3u);
    EXPECT_EQ(events, 3);  // once per completion, on its first event
    for (auto& [i, ev] : firsts) check(ev, "n = 3");
    EXPECT_EQ(firsts[0].cached_tokens, 0);  // computed, not taken from the cache

    RequestParams score = greedy(0);
    score.prompt_logprobs = 2;
    std::vector<TokenEvent> got;
    ASSERT_TRUE(
        e.add_request(prompt, score, [&](const TokenEvent& ev) { got.push_back(ev); }).ok());
    while (e.has_work()) e.step();
    ASSERT_EQ(got.size(), 1u);
    EXPECT_TRUE(got[0].finished);
    EXPECT_EQ(got[0].finish_reason, FinishReason::Length);
    EXPECT_EQ(got[0].completion_tokens, 0);
    EXPECT_EQ(got[0].token, -1);
    check(got[0], "max_tokens 0");
    expect_all_free(e);

    // A pool so small that the requests preempt each other: each still gets its list, once.
    auto probe_engine = make_engine(cfg);
    cfg.kv_cache_memory = static_cast<int64_t>(probe_engine->kv_bytes_per_block()) * 6;
    cfg.block_size = 16;
    auto tight_engine = make_engine(cfg);
    std::vector<std::vector<TokenEvent>> per(6);
    for (int r = 0; r < 6; ++r) {
        RequestParams q = greedy(30);
        q.prompt_logprobs = 2;
        ASSERT_TRUE(tight_engine
                        ->add_request(prompt, q,
                                      [&, r](const TokenEvent& ev) {
                                          if (ev.prompt_logprobs) per[r].push_back(ev);
                                      })
                        .ok());
    }
    while (tight_engine->has_work()) tight_engine->step();
    EXPECT_GT(tight_engine->metrics().preemptions, 0u);
    for (int r = 0; r < 6; ++r) {
        ASSERT_EQ(per[r].size(), 1u) << r;
        check(per[r][0], "preempted");
    }
    expect_all_free(*tight_engine);
}

TEST(Engine, TinyPoolForcesPreemptionAndKeepsOutputs) {
    const int n = 12;
    auto prompts = mixed_prompts(n, 2);
    std::vector<RequestParams> params(n, greedy(24));
    auto roomy_engine = make_engine(small_config());
    Engine& roomy = *roomy_engine;
    auto expected = run_all(roomy, prompts, params);

    auto cfg = small_config();
    cfg.block_size = 16;
    auto probe_engine = make_engine(cfg);
    Engine& probe = *probe_engine;
    cfg.kv_cache_memory = static_cast<int64_t>(probe.kv_bytes_per_block()) * 14;  // 224 slots
    auto tight_engine = make_engine(cfg);
    Engine& tight = *tight_engine;
    auto got = run_all(tight, prompts, params);
    EXPECT_GT(tight.metrics().preemptions, 0u);
    for (int i = 0; i < n; ++i) EXPECT_EQ(got[i].tokens[0], expected[i].tokens[0]) << i;
    expect_all_free(tight);
}

// A pool smaller than the context bounds it: a request asking for more than the pool holds
// finishes at the pool's size (as it would at the context's) instead of being preempted and
// recomputed forever, under every layout and batching; one that cannot even fit its prompt is
// refused with a message naming the KV cache.
TEST(Engine, PoolSmallerThanContextCapsIt) {
    const auto prompt = model().tokenizer->encode("The capital of France is", true, false);
    for (auto layout : {EngineConfig::KvLayout::Paged, EngineConfig::KvLayout::Contiguous})
        for (auto batching : {EngineConfig::Batching::Continuous, EngineConfig::Batching::Static}) {
            auto cfg = small_config();
            cfg.block_size = 16;
            cfg.kv_layout = layout;
            cfg.batching = batching;
            auto probe_engine = make_engine(cfg);
            Engine& probe = *probe_engine;
            cfg.kv_cache_memory = static_cast<int64_t>(probe.kv_bytes_per_block()) * 2;
            auto e_engine = make_engine(cfg);
            Engine& e = *e_engine;
            ASSERT_EQ(e.max_model_len(), 32);
            EXPECT_EQ(e.context_before_kv_cap(), probe.max_model_len());
            auto got = run_all(e, {prompt, prompt}, {greedy(100), greedy(3)});
            EXPECT_EQ(got[0].reason[0], FinishReason::Length);
            EXPECT_EQ(prompt.size() + got[0].tokens[0].size(), 32u);
            EXPECT_EQ(got[1].tokens[0].size(), 3u);
            expect_all_free(e);

            std::vector<int32_t> long_prompt(40, prompt[0]);
            auto r = e.add_request(long_prompt, greedy(2), [](const TokenEvent&) {});
            ASSERT_FALSE(r.ok());
            EXPECT_NE(r.error().message.find("KV cache"), std::string::npos) << r.error().message;
        }
}

TEST(Engine, PrefixCacheHitsGiveIdenticalOutputs) {
    const auto& tok = *model().tokenizer;
    std::string system;
    for (int i = 0; i < 12; ++i) system += "You are a careful assistant who answers briefly. ";
    const auto a = tok.encode(system + "Question: what is two plus two?", true, false);
    const auto b = tok.encode(system + "Question: name a colour.", true, false);

    auto cfg = small_config();
    auto cached_engine = make_engine(cfg);
    Engine& cached = *cached_engine;
    auto first = run_all(cached, {a}, {greedy(8)});
    auto second = run_all(cached, {b}, {greedy(8)});
    auto m = cached.metrics();
    EXPECT_GE(m.prefix_hit_tokens, 96u);  // the shared system text spans several blocks
    EXPECT_GT(m.kv_blocks_cached, 0);

    cfg.prefix_cache = false;
    auto cold_engine = make_engine(cfg);
    Engine& cold = *cold_engine;
    auto ref = run_all(cold, {a, b}, {greedy(8), greedy(8)});
    EXPECT_EQ(cold.metrics().prefix_hit_tokens, 0u);
    EXPECT_EQ(first[0].tokens[0], ref[0].tokens[0]);
    EXPECT_EQ(second[0].tokens[0], ref[1].tokens[0]);
    expect_all_free(cached);
}

TEST(Engine, ParallelSamplesShareThePromptAndCopyOnWrite) {
    const auto prompt =
        model().tokenizer->encode("Write a word: apple, banana, cherry,", true, false);
    RequestParams p;
    p.n = 4;
    p.max_tokens = 10;
    p.ignore_eos = true;
    p.sampling.temperature = 1.0f;
    p.sampling.seed = 5;
    p.sampling.has_seed = true;
    auto e_engine = make_engine(small_config());
    Engine& e = *e_engine;
    auto out = run_all(e, {prompt}, {p});
    ASSERT_EQ(out[0].tokens.size(), 4u);
    EXPECT_EQ(out[0].finals, 4);
    std::set<std::vector<int32_t>> distinct;
    for (auto& [i, t] : out[0].tokens) {
        EXPECT_EQ(t.size(), 10u);
        distinct.insert(t);
    }
    EXPECT_GT(distinct.size(), 1u);
    expect_all_free(e);

    // The same seed gives the same n samples again.
    auto again_engine = make_engine(small_config());
    Engine& again = *again_engine;
    auto out2 = run_all(again, {prompt}, {p});
    EXPECT_EQ(out2[0].tokens, out[0].tokens);
}

TEST(Engine, StopStringsAndStopTokens) {
    const auto prompt = model().tokenizer->encode("1, 2, 3, 4, 5,", true, false);
    auto p = greedy(20);
    p.stop = {" 8"};
    auto e_engine = make_engine(small_config());
    Engine& e = *e_engine;
    auto out = run_all(e, {prompt}, {p});
    EXPECT_EQ(out[0].reason[0], FinishReason::Stop);
    EXPECT_EQ(out[0].text[0], " 6, 7,");
    expect_all_free(e);

    // Included, the text ends with the stop string that completed first.
    p.stop = {", 9", " 8"};
    p.include_stop_str = true;
    out = run_all(e, {prompt}, {p});
    EXPECT_EQ(out[0].reason[0], FinishReason::Stop);
    EXPECT_EQ(out[0].text[0], " 6, 7, 8");
    expect_all_free(e);
}

TEST(Engine, AbortsFreeEverything) {
    auto prompts = mixed_prompts(24, 3);
    auto e_engine = make_engine(small_config());
    Engine& e = *e_engine;
    std::vector<RequestId> ids;
    std::map<RequestId, FinishReason> reasons;
    for (auto& pr : prompts) {
        auto id = e.add_request(pr, greedy(50), [&](const TokenEvent& ev) {
            if (ev.finished) reasons[ev.request] = ev.finish_reason;
        });
        ASSERT_TRUE(id.ok());
        ids.push_back(*id);
    }
    std::mt19937 rng(9);
    for (int step = 0; e.has_work(); ++step) {
        if (step % 2 == 0 && !ids.empty()) {
            const size_t k = rng() % ids.size();
            e.abort(ids[k]);
            ids.erase(ids.begin() + k);
        }
        e.step();
    }
    EXPECT_EQ(reasons.size(), prompts.size());
    int aborted = 0;
    for (auto& [id, r] : reasons) aborted += r == FinishReason::Abort;
    EXPECT_GT(aborted, 0);
    expect_all_free(e);
}

// A request whose processing throws (here its callback, as an allocation failure mid-stream)
// ends with FinishReason::Error and the message; the requests beside it in the batch give the
// tokens they give without it, every block goes back, and the engine serves the next request.
TEST(Engine, ARequestThatThrowsFailsAloneAndLosesNothing) {
    auto prompts = mixed_prompts(6, 21);
    std::vector<RequestParams> params(prompts.size(), greedy(12));
    params[2].n = 3;  // its siblings end with it
    auto reference_engine = make_engine(small_config());
    const auto reference = run_all(*reference_engine, prompts, params);

    auto e_engine = make_engine(small_config());
    Engine& e = *e_engine;
    std::vector<Collected> out(prompts.size());
    std::map<size_t, std::string> errors;
    for (size_t i = 0; i < prompts.size(); ++i) {
        int seen = 0;
        auto id = e.add_request(prompts[i], params[i], [&, i, seen](const TokenEvent& ev) mutable {
            if ((i == 2 || i == 4) && !ev.finished && ++seen == 3) throw std::bad_alloc();
            auto& c = out[i];
            if (ev.token >= 0) c.tokens[ev.index].push_back(ev.token);
            if (ev.finished) {
                c.reason[ev.index] = ev.finish_reason;
                ++c.finals;
                if (ev.finish_reason == FinishReason::Error) errors[i] = ev.error;
            }
        });
        ASSERT_TRUE(id.ok());
    }
    while (e.has_work()) e.step();
    for (size_t i = 0; i < prompts.size(); ++i) {
        if (i == 2 || i == 4) {
            EXPECT_EQ(out[i].finals, params[i].n) << i;
            for (int k = 0; k < params[i].n; ++k)
                EXPECT_EQ(out[i].reason[k], FinishReason::Error) << i << " " << k;
            EXPECT_NE(errors[i].find("bad_alloc"), std::string::npos) << errors[i];
            continue;
        }
        EXPECT_EQ(out[i].tokens, reference[i].tokens) << i;
        EXPECT_EQ(out[i].reason[0], FinishReason::Length) << i;
    }
    expect_all_free(e);
    EXPECT_EQ(e.metrics().finished.at("error"), 2u);
    const auto after = run_all(e, {prompts[0]}, {params[0]});
    EXPECT_EQ(after[0].tokens, reference[0].tokens);
    expect_all_free(e);
}

// abort_all from another thread while the engine thread runs (a server's shutdown): every
// request ends with Abort and nothing is held. The engine thread alone touches its requests,
// which ThreadSanitizer checks in build-tsan.
TEST(Engine, AbortAllFromAnotherThreadWhileRunning) {
    auto prompts = mixed_prompts(8, 5);
    auto e_engine = make_engine(small_config());
    Engine& e = *e_engine;
    std::mutex mu;
    std::condition_variable cv;
    std::map<RequestId, FinishReason> reasons;
    int tokens = 0;
    e.start();
    for (auto& pr : prompts)
        ASSERT_TRUE(e.add_request(pr, greedy(400), [&](const TokenEvent& ev) {
                         std::lock_guard lk(mu);
                         tokens += ev.token >= 0;
                         if (ev.finished) reasons[ev.request] = ev.finish_reason;
                         cv.notify_all();
                     }).ok());
    {
        std::unique_lock lk(mu);
        cv.wait(lk, [&] { return tokens >= 16; });  // running, mid-generation
    }
    e.abort_all();
    {
        std::unique_lock lk(mu);
        ASSERT_TRUE(cv.wait_for(lk, std::chrono::seconds(60),
                                [&] { return reasons.size() == prompts.size(); }));
    }
    e.stop();
    for (auto& [id, r] : reasons) EXPECT_EQ(r, FinishReason::Abort) << id;
    expect_all_free(e);
    EXPECT_FALSE(e.has_work());
}

TEST(Engine, RejectsBadRequestsWithoutSideEffects) {
    auto e_engine = make_engine(small_config());
    Engine& e = *e_engine;
    EXPECT_FALSE(e.add_request({}, greedy(4), nullptr).ok());
    EXPECT_FALSE(e.add_request({1, 999999}, greedy(4), nullptr).ok());
    auto err = e.add_request(std::vector<int32_t>(600, 42), greedy(4), nullptr);
    ASSERT_FALSE(err.ok());
    EXPECT_NE(err.error().message.find("600"), std::string::npos);
    auto p = greedy(4);
    p.n = 0;
    EXPECT_FALSE(e.add_request({1, 2}, p, nullptr).ok());
    EXPECT_FALSE(e.has_work());
    auto cfg = small_config();
    cfg.max_waiting = 2;
    auto q_engine = make_engine(cfg);
    Engine& q = *q_engine;
    EXPECT_TRUE(q.add_request({1, 2}, greedy(2), nullptr).ok());
    EXPECT_TRUE(q.add_request({1, 2}, greedy(2), nullptr).ok());
    auto full = q.add_request({1, 2}, greedy(2), nullptr);
    ASSERT_FALSE(full.ok());
    EXPECT_EQ(full.error().code, ferry::ErrorCode::Unavailable);
    EXPECT_EQ(full.error().message.rfind("queue full", 0), 0u);
    while (q.has_work()) q.step();
    expect_all_free(q);
}

// Continuous batching may only be invisible if a sequence's logits do not depend on what else
// is in the batch, to the bit: with 8-bit activations a one-ulp change can flip a rounding
// and, a few layers later, a greedy pick.
TEST(Engine, ForwardIsBatchInvariant) {
    const auto& m = *model().model;
    const auto& tok = *model().tokenizer;
    ModelRunner runner(m, model().backend, 32, 16);
    const auto a = tok.encode("The capital of France is", false, false);
    const auto b = tok.encode("Once upon a time there was a little", false, false);
    const int n_vocab = m.config().n_vocab;
    std::vector<float> alone;
    for (int n : {1, 2, 3, 6, 11}) {
        std::vector<std::vector<int32_t>> tables(n);
        std::vector<ModelRunner::Work> work;
        for (int i = 0; i < n; ++i) {
            tables[i] = {i};
            work.push_back(
                {i ? std::span<const int32_t>(b) : std::span<const int32_t>(a), 0, tables[i], 1});
        }
        const auto logits = runner.run(work);
        if (alone.empty()) alone.assign(logits.begin(), logits.begin() + n_vocab);
        for (int v = 0; v < n_vocab; ++v)
            ASSERT_EQ(alone[v], logits[v]) << "batch of " << n << ", logit " << v;
    }
}

// --max-tpot-ms: once step times are measured, a prompt that arrives while another request
// decodes is prefilled in chunks that keep each step within the target (at least the minimum
// chunk when even the decodes alone take longer), and a generous target lets it run in one step;
// the outputs are the same whatever the chunks.
TEST(Engine, LatencyTargetSizesPrefillChunksFromMeasuredSteps) {
    const auto prompts = mixed_prompts(2, 5);
    std::vector<int32_t> long_prompt;
    while (long_prompt.size() < 200)
        long_prompt.insert(long_prompt.end(), prompts[1].begin(), prompts[1].end());
    long_prompt.resize(200);
    // Steps from the long prompt's arrival to its first token, and the tokens of both.
    auto run = [&](double max_tpot_ms, std::vector<std::vector<int32_t>>& tokens) {
        auto cfg = small_config();
        cfg.max_tpot_ms = max_tpot_ms;
        auto eng = make_engine(cfg);
        tokens.assign(2, {});
        int first_token_step = -1, steps = 0;
        auto collect = [&](int i) {
            return [&, i](const TokenEvent& e) {
                if (e.token < 0) return;
                tokens[i].push_back(e.token);
                if (i == 1 && first_token_step < 0) first_token_step = steps;
            };
        };
        EXPECT_TRUE(eng->add_request(prompts[0], greedy(40), collect(0)).ok());
        for (int i = 0; i < 6; ++i) eng->step();  // measures decode steps and the first prefill
        EXPECT_TRUE(eng->add_request(long_prompt, greedy(4), collect(1)).ok());
        while (eng->has_work()) {
            ++steps;
            eng->step();
        }
        expect_all_free(*eng);
        return first_token_step;
    };
    std::vector<std::vector<int32_t>> fixed, tight, loose;
    EXPECT_EQ(run(0, fixed), 2) << "no target: 128-token chunks while decoding";
    EXPECT_EQ(run(1e-6, tight),
              (200 + Scheduler::kMinPrefillChunk - 1) / Scheduler::kMinPrefillChunk)
        << "a target nothing meets: the minimum chunk";
    EXPECT_EQ(run(1e6, loose), 1) << "a target everything meets: the token budget";
    EXPECT_EQ(tight, fixed);
    EXPECT_EQ(loose, fixed);
}
