#include "engine/spec_planner.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ferry::engine {
namespace {

// Acceptance decays so the estimate follows a sequence whose output stops (or starts) copying
// its input: a sequence's own record over its last ~10 verifications, the pool's over ~100.
constexpr double kPoolDecay = 0.99;

}  // namespace

DepthRates SpecPlanner::acceptance(const AcceptanceStats& seq,
                                   std::span<const double> per_token) const {
    if (per_token.empty()) return acceptance(seq);
    DepthRates r{};
    for (size_t i = 0; i < per_token.size() && i < r.size(); ++i) r[i] = per_token[i];
    return r;
}

DepthRates constant_rates(double a) {
    DepthRates r;
    r.fill(a);
    return r;
}

StepCostModel::StepCostModel(int max_tokens)
    : mean_(static_cast<size_t>(std::max(1, max_tokens)) + 1, 0.0),
      count_(static_cast<size_t>(std::max(1, max_tokens)) + 1, 0),
      recent_((static_cast<size_t>(std::max(1, max_tokens)) + 1) * kRecent, 0.0) {}

void StepCostModel::record(int64_t tokens, double seconds) {
    if (tokens <= 0 || tokens >= static_cast<int64_t>(mean_.size()) || !(seconds > 0)) return;
    // The median of the width's last kRecent steps: a step the OS descheduled (three times the
    // others, on a shared machine) moves it by one place, not by a third, and a load that
    // lasts takes over within kRecent / 2 steps.
    const auto i = static_cast<size_t>(tokens);
    double* ring = recent_.data() + i * kRecent;
    ring[count_[i] % kRecent] = seconds;
    ++count_[i];
    const size_t n = std::min<size_t>(count_[i], kRecent);
    std::array<double, kRecent> sorted;
    std::copy(ring, ring + n, sorted.begin());
    std::sort(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(n));
    mean_[i] = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
}

bool StepCostModel::measured(int64_t tokens) const {
    return tokens > 0 && tokens < static_cast<int64_t>(mean_.size()) &&
           count_[static_cast<size_t>(tokens)] > 0;
}

std::optional<double> StepCostModel::estimate(int64_t tokens) const {
    if (tokens <= 0) return std::nullopt;
    const int64_t n = static_cast<int64_t>(mean_.size());
    if (tokens < n && count_[tokens] > 0) return mean_[tokens];
    int64_t lo = std::min(tokens, n) - 1;
    while (lo > 0 && count_[lo] == 0) --lo;
    if (lo <= 0) return std::nullopt;
    int64_t hi = tokens + 1;
    while (hi < n && count_[hi] == 0) ++hi;
    if (hi < n) {  // between two measured counts
        const double f = double(tokens - lo) / double(hi - lo);
        return mean_[lo] + f * (mean_[hi] - mean_[lo]);
    }
    int64_t below = lo - 1;
    while (below > 0 && count_[below] == 0) --below;
    double slope = 0;
    if (below > 0) slope = std::max(0.0, (mean_[lo] - mean_[below]) / double(lo - below));
    return mean_[lo] + slope * double(tokens - lo);
}

std::optional<int64_t> StepCostModel::max_tokens_within(double seconds, int64_t limit) const {
    const int64_t n = static_cast<int64_t>(mean_.size());
    std::vector<int64_t> pts;  // the measured counts, ascending
    for (int64_t i = 1; i < n; ++i)
        if (count_[i] > 0) pts.push_back(i);
    if (pts.empty()) return std::nullopt;
    limit = std::max<int64_t>(limit, 1);
    const int64_t last = pts.back();
    if (limit > last) {
        // Above the largest count measured nothing says how a step grows: assume no better
        // than in proportion to its tokens (which counts the fixed cost of a step once per
        // token), so the answer errs short and the next, longer step gets measured.
        auto bound = [&](int64_t t) {
            return std::max(*estimate(t), mean_[last] * double(t) / double(last));
        };
        if (bound(limit) <= seconds) return limit;
        if (bound(last + 1) <= seconds) {
            int64_t lo = last + 1, hi = limit;  // bound(lo) fits, bound(hi) does not
            while (hi - lo > 1) {
                const int64_t mid = lo + (hi - lo) / 2;
                (bound(mid) <= seconds ? lo : hi) = mid;
            }
            return lo;
        }
    }
    // Between measured counts the estimate is linear, so each piece, from the top down,
    // either holds the answer or passes the search below it. Below the smallest count nothing
    // is known.
    for (size_t k = pts.size() - 1; k > 0; --k) {
        const int64_t lo = pts[k - 1];
        if (lo > limit) continue;
        const int64_t hi = std::min(pts[k], limit);
        const double f_lo = *estimate(lo), f_hi = *estimate(hi);
        if (f_hi <= seconds) return hi;
        if (f_lo <= seconds)
            return lo + static_cast<int64_t>(std::floor((seconds - f_lo) / (f_hi - f_lo) *
                                                        static_cast<double>(hi - lo)));
    }
    // The smallest measured count is the answer's ceiling when it fits (a step costs more with
    // more tokens), else nothing known fits.
    if (*estimate(pts[0]) <= seconds) return std::min(pts[0], limit);
    return 0;
}

double step_time_allowance(double target_s, std::span<const TpotProgress> decoding) {
    double allowed = std::numeric_limits<double>::infinity();
    for (const TpotProgress& p : decoding)
        allowed = std::min(allowed, std::max(target_s, target_s * p.tokens - p.since_first_s));
    return std::isfinite(allowed) ? allowed : target_s;
}

void AcceptanceStats::record(int proposed, int accepted_now, double decay) {
    proposed = std::min(proposed, kMaxDraftTokens);
    if (proposed <= 0) return;
    for (int j = 0; j < kMaxDraftTokens; ++j) {
        accepted[j] *= decay;
        trials[j] *= decay;
    }
    // Depths 1..accepted were reached and accepted; the next one, if proposed, was reached and
    // rejected; deeper ones were never judged.
    for (int j = 0; j < proposed && j <= accepted_now; ++j) {
        trials[j] += 1;
        if (j < accepted_now) accepted[j] += 1;
    }
}

DepthRates AcceptanceStats::rates(const DepthRates& prior, double prior_weight) const {
    DepthRates r;
    for (int j = 0; j < kMaxDraftTokens; ++j) {
        const double a = (accepted[j] + prior[j] * prior_weight) / (trials[j] + prior_weight);
        r[j] = std::clamp(a, 0.0, 0.99);  // a = 1 would make every depth look free
    }
    return r;
}

DepthRates AcceptanceStats::rates(double prior, double prior_weight) const {
    // A depth little tried leans on the one above it, not on a constant: a plan that stopped at
    // depth j would otherwise never learn that the copying goes on past it.
    DepthRates r;
    double above = prior;
    for (int j = 0; j < kMaxDraftTokens; ++j) {
        r[j] = std::clamp((accepted[j] + above * prior_weight) / (trials[j] + prior_weight), 0.0,
                          0.99);
        above = r[j];
    }
    return r;
}

void ShadowDraft::start(std::span<const int32_t> draft) {
    tokens_.assign(draft.begin(), draft.end());
    matched_ = 0;
}

bool ShadowDraft::observe(int32_t token, int* proposed, int* accepted) {
    if (tokens_.empty()) return false;
    const bool hit = tokens_[matched_] == token;
    if (hit) ++matched_;
    if (hit && matched_ < tokens_.size()) return false;
    *proposed = static_cast<int>(tokens_.size());
    *accepted = static_cast<int>(matched_);
    tokens_.clear();
    return true;
}

DraftPlan plan_drafts(std::span<const DraftCandidate> candidates, int64_t base_tokens,
                      double base_yield, const StepCostModel& cost, double min_gain) {
    DraftPlan plan;
    plan.k.assign(candidates.size(), 0);
    const auto base = cost.estimate(base_tokens);
    if (!base || !(*base > 0)) return plan;
    plan.plain_tokens_per_s = base_yield / *base;
    plan.tokens_per_s = plan.plain_tokens_per_s;

    // Every draft token a candidate could verify, with its expected yield a_1 ... a_j; a
    // sequence's j-th token always comes after its (j-1)-th, since the product falls with j
    // (ties keep the order, the sort being stable).
    struct Increment {
        double yield;
        double seconds;
        size_t who;
    };
    std::vector<Increment> inc;
    for (size_t i = 0; i < candidates.size(); ++i) {
        const auto& c = candidates[i];
        double y = 1;
        for (int j = 0; j < std::min(c.max_k, kMaxDraftTokens); ++j) {
            y *= c.accept[j];
            if (y < 1e-4) break;
            inc.push_back({y, c.seconds_per_token, i});
        }
    }
    std::stable_sort(inc.begin(), inc.end(),
                     [](const Increment& a, const Increment& b) { return a.yield > b.yield; });

    double yield = base_yield, extra_s = 0, best = plan.plain_tokens_per_s * (1 + min_gain);
    size_t take = 0;
    for (size_t m = 1; m <= inc.size(); ++m) {
        yield += inc[m - 1].yield;
        extra_s += inc[m - 1].seconds;
        const auto t = cost.estimate(base_tokens + static_cast<int64_t>(m));
        if (!t) break;
        const double rate = yield / (*t + extra_s);
        if (rate > best) {
            best = rate;
            take = m;
        }
    }
    if (take == 0) return plan;
    plan.tokens_per_s = best;
    for (size_t m = 0; m < take; ++m) ++plan.k[inc[m].who];
    return plan;
}

void SpecPlanner::record_draft_time(int64_t tokens, double seconds) {
    if (tokens <= 0 || !(seconds >= 0)) return;
    const double per = seconds / static_cast<double>(tokens);
    draft_s_per_token_ = draft_s_per_token_ > 0 ? draft_s_per_token_ * 0.9 + per * 0.1 : per;
}

void SpecPlanner::record_verification(AcceptanceStats& seq, int proposed, int accepted) {
    seq.record(proposed, accepted);
    pooled_.record(proposed, accepted, kPoolDecay);
}

DraftPlan SpecPlanner::plan(std::span<const DraftCandidate> candidates, int64_t base_tokens,
                            double base_yield) {
    DraftPlan p = plan_drafts(candidates, base_tokens, base_yield, cost_);
    const bool any = std::any_of(p.k.begin(), p.k.end(), [](int k) { return k > 0; });
    const bool possible = std::any_of(candidates.begin(), candidates.end(),
                                      [](const DraftCandidate& c) { return c.max_k > 0; });
    if (any || !possible) {
        declined_run_ = 0;
        return p;
    }
    // A probe: one draft token for the likeliest candidate, once in a while, so that a width
    // measured expensive under a passing load gets measured again.
    if (++declined_run_ < kProbeEvery || !cost_.estimate(base_tokens)) {
        ++declined_total_;
    } else {
        declined_run_ = 0;
        size_t best = candidates.size();
        for (size_t i = 0; i < candidates.size(); ++i)
            if (candidates[i].max_k > 0 &&
                (best == candidates.size() || candidates[i].accept[0] > candidates[best].accept[0]))
                best = i;
        p.k[best] = 1;
    }
    return p;
}

}  // namespace ferry::engine
