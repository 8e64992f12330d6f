// core/proc_memory.h: /proc/self/status parsing, the live figures, the peak reset.
#include "core/proc_memory.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace pelican {
namespace {

constexpr const char* kStatus =
    "Name:\tpelican\n"
    "VmPeak:\t  900000 kB\n"
    "VmHWM:\t   700000 kB\n"
    "VmRSS:\t   612000 kB\n"
    "RssAnon:\t  598000 kB\n"
    "RssFile:\t   13000 kB\n"
    "RssShmem:\t   1000 kB\n"
    "Threads:\t3\n";

TEST(ProcMemory, ParsesTheStatusFields) {
    auto m = parse_proc_status(kStatus);
    ASSERT_TRUE(m.ok()) << m.error().message;
    EXPECT_EQ(m->rss, 612000u * 1024);
    EXPECT_EQ(m->anon, 598000u * 1024);
    EXPECT_EQ(m->file, 13000u * 1024);
    EXPECT_EQ(m->shmem, 1000u * 1024);
    EXPECT_EQ(m->peak, 700000u * 1024);
    EXPECT_EQ(describe_memory(*m),
              "RSS 597.66 MiB (anon 583.98 MiB, file 12.70 MiB, shmem 1000.00 KiB), peak 683.59 MiB");
    m->shmem = 0;
    EXPECT_EQ(describe_memory(*m), "RSS 597.66 MiB (anon 583.98 MiB, file 12.70 MiB), peak 683.59 MiB");
}

TEST(ProcMemory, MissingOrMalformedFieldsAreErrors) {
    auto m = parse_proc_status("VmRSS:\t1 kB\nRssAnon:\t1 kB\nRssFile:\t0 kB\nRssShmem:\t0 kB\n");
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.error().message.find("VmHWM"), std::string::npos) << m.error().message;
    m = parse_proc_status("VmHWM:\t1 kB\nVmRSS:\tmany kB\nRssAnon:\t1 kB\nRssFile:\t0 kB\nRssShmem:\t0 kB\n");
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.error().message.find("VmRSS"), std::string::npos) << m.error().message;
    // A key that only starts like a wanted one ("VmRSSx") is not it.
    m = parse_proc_status("VmHWM:\t1 kB\nVmRSSx:\t1 kB\nRssAnon:\t1 kB\nRssFile:\t0 kB\nRssShmem:\t0 kB\n");
    EXPECT_FALSE(m.ok());
}

TEST(ProcMemory, ThisProcessAnonymousGrowthAndPeakReset) {
    auto before = read_proc_memory();
    ASSERT_TRUE(before.ok()) << before.error().message;
    EXPECT_EQ(before->rss, before->anon + before->file + before->shmem);
    EXPECT_GE(before->peak, before->rss);

    constexpr size_t kBytes = size_t{64} << 20;
    {
        std::vector<char> v(kBytes);
        std::memset(v.data(), 1, v.size());  // touch every page
        auto during = read_proc_memory();
        ASSERT_TRUE(during.ok());
        EXPECT_GE(during->anon, before->anon + kBytes - (size_t{1} << 20));
        EXPECT_GE(during->peak, during->rss);
        EXPECT_NE(v[kBytes / 2], 0);
    }
    auto freed = read_proc_memory();
    ASSERT_TRUE(freed.ok());
    EXPECT_GE(freed->peak, before->rss + kBytes - (size_t{1} << 20));  // the peak remembers it

    // After the reset the peak is the RSS now, far below the 64 MiB just freed (returned to the
    // system: a block that large is its own mapping).
    ASSERT_TRUE(reset_peak_memory().ok());
    auto reset = read_proc_memory();
    ASSERT_TRUE(reset.ok());
    EXPECT_LT(reset->peak, freed->peak - kBytes / 2);
    EXPECT_GE(reset->peak, reset->rss);
}

}  // namespace
}  // namespace pelican
