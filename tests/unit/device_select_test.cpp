// Device selection (EngineOptions / SessionOptions .device, --device) on machines without a usable
// GPU, as in CI: auto runs on the CPU, cpu always works, cuda is a clear error (API and CLI).
// The tests that need the absence of a GPU skip when one is present (cuda_forward_test.cpp covers
// that side).
#include <gtest/gtest.h>

#include "cli_test_util.h"
#include "pelican/engine.h"
#include "runtime/forward_factory.h"

namespace pelican {
namespace {

const std::string kModel = std::string(PELICAN_SOURCE_DIR) + "/tests/golden/llama";

TEST(DeviceSelect, ParseAndName) {
    for (Device d : {Device::kAuto, Device::kCpu, Device::kCuda}) {
        auto p = parse_device(device_name(d));
        ASSERT_TRUE(p.ok());
        EXPECT_EQ(*p, d);
    }
    auto bad = parse_device("gpu");
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.error().message.find("choose auto, cpu or cuda"), std::string::npos) << bad.error().message;
}

TEST(DeviceSelect, CpuAlwaysWorks) {
    auto e = Engine::load(kModel, EngineOptions{.device = Device::kCpu});
    ASSERT_TRUE(e.ok()) << e.error().message;
    EXPECT_EQ((*e)->device(), Device::kCpu);
    EXPECT_EQ((*e)->device_description(), "cpu");
    auto s = (*e)->create_session({.n_ctx = 16, .n_threads = 1});
    ASSERT_TRUE(s.ok()) << s.error().message;
    EXPECT_EQ((*s)->device_name(), "cpu");
    auto cuda_session = (*e)->create_session({.n_ctx = 16, .device = Device::kCuda});
    ASSERT_FALSE(cuda_session.ok());
    EXPECT_NE(cuda_session.error().message.find("engine loaded for CUDA"), std::string::npos)
        << cuda_session.error().message;
}

TEST(DeviceSelect, CudaWithoutAGpuIsAClearError) {
    if (cuda_usable().ok()) GTEST_SKIP() << "a CUDA device is usable here";
    auto e = Engine::load(kModel, EngineOptions{.device = Device::kCuda});
    ASSERT_FALSE(e.ok());
    const std::string& msg = e.error().message;
    EXPECT_NE(msg.find("device cuda: "), std::string::npos) << msg;
    // Built with CUDA: no NVIDIA device at all (checked before the backend library is loaded), or
    // a driver that sees no GPU; built without it: says so.
    if (cuda_built())
        EXPECT_TRUE(msg.find("no NVIDIA GPU on this machine") != std::string::npos ||
                    msg.find("no usable CUDA device") != std::string::npos)
            << msg;
    else
        EXPECT_NE(msg.find("built without the CUDA backend"), std::string::npos) << msg;
    EXPECT_NE(msg.find("--device cpu"), std::string::npos) << msg;

    auto autod = Engine::load(kModel);  // auto falls back to the CPU
    ASSERT_TRUE(autod.ok()) << autod.error().message;
    EXPECT_EQ((*autod)->device(), Device::kCpu);

    test::TempDir tmp("device_select_cli");
    auto r = test::run_pelican_in({"run", "-m", kModel, "-p", "hi", "-n", "2", "--device", "cuda"}, tmp);
    EXPECT_EQ(r.status, 1) << r.err;
    EXPECT_NE(r.err.find("device cuda: "), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
    r = test::run_pelican_in({"bench", "-m", kModel, "-p", "4", "-n", "2", "--device", "cuda"}, tmp);
    EXPECT_EQ(r.status, 1) << r.err;
    EXPECT_NE(r.err.find("device cuda: "), std::string::npos) << r.err;
}

TEST(DeviceSelect, CliRejectsAnUnknownDevice) {
    test::TempDir tmp("device_select_bad");
    const auto r = test::run_pelican_in({"run", "-m", kModel, "-p", "hi", "-n", "2", "--device", "tpu"}, tmp);
    EXPECT_EQ(r.status, 2) << r.err;  // a usage error
    EXPECT_NE(r.err.find("unknown device \"tpu\""), std::string::npos) << r.err;
    const auto c = test::run_pelican_in(
        {"run", "-m", kModel, "-p", "hi", "-n", "2", "--temp", "0", "--device", "cpu", "-t", "1"}, tmp);
    EXPECT_EQ(c.status, 0) << c.err;
    EXPECT_NE(c.err.find(", 1 thread,"), std::string::npos) << c.err;
}

}  // namespace
}  // namespace pelican
