// The CUDA backend's recorded launches (kernels/cuda/launch_queue.h) and the choice of which to
// run as graphs (graph_cache.h), on the host: both are plain C++, and what makes a graph replay
// right is theirs: a queue's signature must change whenever its work would, and only then.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cuda/graph_cache.h"
#include "kernels/cuda/launch_queue.h"

namespace ferry {
namespace {

using kernels::cuda::GraphCache;
using kernels::cuda::LaunchEnv;
using kernels::cuda::LaunchQueue;

std::vector<std::string>* g_log = nullptr;

struct ScaleArgs {
    float* x;
    int64_t n;
    float s;
    uint8_t flag;
};
void scale_launch(const ScaleArgs& a, const LaunchEnv&) {
    g_log->push_back("scale " + std::to_string(a.n) + " " + std::to_string(a.s));
}
void other_launch(const ScaleArgs& a, const LaunchEnv&) {
    g_log->push_back("other " + std::to_string(a.n));
}
struct SumArgs {
    uint64_t values;  // staged int32s
    int64_t n;
};
void sum_launch(const SumArgs& a, const LaunchEnv& env) {
    int64_t sum = 0;
    for (int64_t i = 0; i < a.n; ++i) sum += env.at<const int32_t>(a.values)[i];
    g_log->push_back("sum " + std::to_string(sum));
}

// One "decode step": a scale, then a sum over the staged tokens.
void record_step(LaunchQueue& q, float* x, float s, const std::vector<int32_t>& tokens) {
    ScaleArgs& a = q.record(&scale_launch);
    a.x = x, a.n = 8, a.s = s;
    const uint64_t at = q.stage(tokens.data(), tokens.size());
    SumArgs& b = q.record(&sum_launch);
    b.values = at, b.n = static_cast<int64_t>(tokens.size());
}

class LaunchQueueTest : public ::testing::Test {
  protected:
    void SetUp() override { g_log = &log; }
    void TearDown() override { g_log = nullptr; }
    // Runs q against a copy of its staged bytes, as the backend does against the device's.
    void run(const LaunchQueue& q) {
        device.assign(q.staged().begin(), q.staged().end());
        q.run(LaunchEnv{nullptr, device.data()});
    }
    std::vector<std::string> log;
    std::vector<std::byte> device;
};

TEST_F(LaunchQueueTest, RunsTheLaunchesInOrderWithTheirStagedArguments) {
    LaunchQueue q;
    float x[8] = {};
    record_step(q, x, 2.0f, {1, 2, 3});
    ScaleArgs& c = q.record(&other_launch);
    c.n = 5;
    EXPECT_EQ(q.launches(), 3u);
    run(q);
    EXPECT_EQ(log, (std::vector<std::string>{"scale 8 2.000000", "sum 6", "other 5"}));
    q.clear();
    EXPECT_TRUE(q.empty());
    EXPECT_TRUE(q.staged().empty());
}

TEST_F(LaunchQueueTest, SignatureFollowsTheWorkNotTheStagedValues) {
    float x[8], y[8];
    const auto sig = [&](float* p, float s, std::vector<int32_t> tokens) {
        LaunchQueue q;
        record_step(q, p, s, tokens);
        return q.signature();
    };
    const std::string base = sig(x, 2.0f, {1, 2, 3});
    // Other tokens of the same count: the same launches, only the staged bytes differ.
    EXPECT_EQ(sig(x, 2.0f, {7, 8, 9}), base);
    // A table grown within its size class (3 to 16 int32s: 64 bytes either way) keeps it too,
    // though the sum's n, a launch argument, changes it.
    {
        LaunchQueue a, b;
        const std::vector<int32_t> three = {1, 2, 3}, sixteen(16, 1);
        a.stage(three.data(), three.size());
        b.stage(sixteen.data(), sixteen.size());
        EXPECT_EQ(a.signature(), b.signature());
        const std::vector<int32_t> seventeen(17, 1);
        LaunchQueue c;
        c.stage(seventeen.data(), seventeen.size());
        EXPECT_NE(c.signature(), a.signature());
    }
    EXPECT_NE(sig(x, 2.0f, {1, 2, 3, 4}), base);  // n differs
    EXPECT_NE(sig(y, 2.0f, {1, 2, 3}), base);     // another buffer
    EXPECT_NE(sig(x, 2.5f, {1, 2, 3}), base);     // another scalar
    // Another function with the same bytes.
    LaunchQueue q1, q2;
    q1.record(&scale_launch).n = 3;
    q2.record(&other_launch).n = 3;
    EXPECT_NE(q1.signature(), q2.signature());
    // The same launches in another order.
    LaunchQueue o1, o2;
    o1.record(&scale_launch).n = 1;
    o1.record(&scale_launch).n = 2;
    o2.record(&scale_launch).n = 2;
    o2.record(&scale_launch).n = 1;
    EXPECT_NE(o1.signature(), o2.signature());
}

TEST_F(LaunchQueueTest, StagedArraysSitInSizeClassesAndReservedRoomIsZero) {
    EXPECT_EQ(LaunchQueue::size_class(0), 0u);
    EXPECT_EQ(LaunchQueue::size_class(1), 64u);
    EXPECT_EQ(LaunchQueue::size_class(64), 64u);
    EXPECT_EQ(LaunchQueue::size_class(65), 128u);
    EXPECT_EQ(LaunchQueue::size_class(256), 256u);
    EXPECT_EQ(LaunchQueue::size_class(257), 512u);
    EXPECT_EQ(LaunchQueue::size_class(5000), 8192u);
    LaunchQueue q;
    const std::vector<int64_t> v = {-1, -1, -1};
    const uint64_t a = q.stage(v.data(), v.size());
    const uint64_t b = q.reserve(40);
    const uint64_t c = q.stage(v.data(), 1);
    EXPECT_EQ(a, 0u);
    EXPECT_EQ(b, 64u);
    EXPECT_EQ(c, 128u);
    EXPECT_EQ(q.staged().size(), 192u);
    for (size_t i = b; i < b + 64; ++i) EXPECT_EQ(q.staged()[i], std::byte{0});
    // Every offset is 64-byte aligned: any staged element type lands aligned on the device.
    EXPECT_EQ(c % 64, 0u);
}

TEST_F(LaunchQueueTest, KeepsTensorsAliveUntilItRan) {
    LaunchQueue q;
    auto mem = std::make_shared<std::vector<float>>(8);
    std::weak_ptr<std::vector<float>> watch = mem;
    {
        const int64_t shape[] = {2, 4};
        const Tensor t = Tensor(mem->data(), DType::F32, shape, Device::CPU).owned_by(mem);
        mem.reset();
        q.keep(t);
    }
    EXPECT_FALSE(watch.expired());  // the queue holds the only owner now
    q.clear();
    EXPECT_TRUE(watch.expired());
}

void* handle(int i) {
    return reinterpret_cast<void*>(static_cast<uintptr_t>(i));
}

TEST(GraphCache, CapturesOnTheSecondSightingThenReplays) {
    GraphCache c;
    EXPECT_EQ(c.decide("step").action, GraphCache::Action::Eager);
    EXPECT_EQ(c.decide("step").action, GraphCache::Action::Capture);
    EXPECT_TRUE(c.store("step", handle(1)).empty());
    for (int i = 0; i < 3; ++i) {
        const auto d = c.decide("step");
        EXPECT_EQ(d.action, GraphCache::Action::Replay);
        EXPECT_EQ(d.graph, handle(1));
    }
    EXPECT_EQ(c.decide("prefill").action, GraphCache::Action::Eager);
    EXPECT_EQ(c.stats().captured, 1u);
    EXPECT_EQ(c.stats().replayed, 3u);
    EXPECT_EQ(c.stats().eager, 2u);
    EXPECT_EQ(c.stats().resident, 1u);
    EXPECT_EQ(c.take_all(), std::vector<void*>{handle(1)});
    EXPECT_EQ(c.decide("step").action, GraphCache::Action::Eager);  // forgotten
}

TEST(GraphCache, OffRunsEverythingEagerly) {
    GraphCache c(GraphCache::Options{.enabled = false});
    for (int i = 0; i < 5; ++i) EXPECT_EQ(c.decide("step").action, GraphCache::Action::Eager);
    EXPECT_EQ(c.stats().eager, 5u);
}

TEST(GraphCache, EvictsTheLeastRecentlyUsedAndHandsItBack) {
    GraphCache c(GraphCache::Options{.capacity = 2});
    const auto capture = [&](const std::string& s, int h) {
        c.decide(s);
        EXPECT_EQ(c.decide(s).action, GraphCache::Action::Capture);
        return c.store(s, handle(h));
    };
    EXPECT_TRUE(capture("a", 1).empty());
    EXPECT_TRUE(capture("b", 2).empty());
    EXPECT_EQ(c.decide("a").action, GraphCache::Action::Replay);  // b is now the oldest
    EXPECT_EQ(capture("c", 3), std::vector<void*>{handle(2)});
    EXPECT_EQ(c.stats().evicted, 1u);
    EXPECT_EQ(c.stats().resident, 2u);
    EXPECT_EQ(c.decide("a").graph, handle(1));
    EXPECT_EQ(c.decide("c").graph, handle(3));
    // The evicted one waits four times as many sightings (8) before it is captured again, so
    // more recurring shapes than the cache holds do not capture every other step.
    for (int i = 0; i < 7; ++i) EXPECT_EQ(c.decide("b").action, GraphCache::Action::Eager) << i;
    EXPECT_EQ(c.decide("b").action, GraphCache::Action::Capture);
}

TEST(GraphCache, AFailedCaptureRunsEagerlyFromThenOn) {
    GraphCache c;
    c.decide("odd");
    ASSERT_EQ(c.decide("odd").action, GraphCache::Action::Capture);
    c.refuse("odd");
    for (int i = 0; i < 4; ++i) EXPECT_EQ(c.decide("odd").action, GraphCache::Action::Eager);
    EXPECT_EQ(c.stats().refused, 1u);
}

TEST(GraphCache, ForgetsUncapturedCountsPastItsTrackingBound) {
    GraphCache c(GraphCache::Options{.max_tracked = 4});
    c.decide("kept");
    c.decide("kept");
    c.store("kept", handle(9));
    for (int i = 0; i < 4; ++i) c.decide("once" + std::to_string(i));
    c.decide("new");  // four counts held: they go, the graph stays
    EXPECT_EQ(c.decide("kept").action, GraphCache::Action::Replay);
    EXPECT_EQ(c.decide("once0").action, GraphCache::Action::Eager);  // a first sighting again
    EXPECT_EQ(c.decide("once0").action, GraphCache::Action::Capture);
    EXPECT_EQ(c.decide("new").action, GraphCache::Action::Capture);  // counted after the reset
}

}  // namespace
}  // namespace ferry
