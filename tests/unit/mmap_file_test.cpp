// MappedFile::release_pages: which pages leave the process' resident set (read from
// /proc/self/pagemap), and that the bytes read afterwards are the file's.
#include "core/mmap_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "temp_dir.h"

namespace pelican {
namespace {

const size_t kPage = static_cast<size_t>(::sysconf(_SC_PAGESIZE));

// Per page of [p, p + n_pages * kPage): is it mapped into this process (pagemap bit 63)?
std::vector<bool> present(const uint8_t* p, size_t n_pages) {
    std::vector<bool> out(n_pages);
    const int fd = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    EXPECT_GE(fd, 0);
    if (fd < 0) return out;
    const auto first = reinterpret_cast<uintptr_t>(p) / kPage;
    for (size_t i = 0; i < n_pages; ++i) {
        uint64_t e = 0;
        EXPECT_EQ(::pread(fd, &e, sizeof e, static_cast<off_t>((first + i) * sizeof e)),
                  static_cast<ssize_t>(sizeof e));
        out[i] = (e >> 63) & 1;
    }
    ::close(fd);
    return out;
}

// A file of n_pages pages, byte i = (i * 7 + 3) mod 256, mapped.
struct Fixture {
    test::TempDir dir{"mmap"};
    std::vector<uint8_t> bytes;
    MappedFile file;

    explicit Fixture(size_t n_pages) : bytes(n_pages * kPage) {
        for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7 + 3);
        EXPECT_TRUE(write_file_atomic(dir / "f.bin", bytes).ok());
        auto m = MappedFile::open(dir / "f.bin");
        EXPECT_TRUE(m.ok()) << m.error().message;
        if (m.ok()) file = std::move(m).value();
    }
    // Reads every byte through the mapping (faulting every page in) and compares with the file.
    bool read_all_equal() const {
        bool same = file.size() == bytes.size();
        for (size_t i = 0; same && i < bytes.size(); ++i) same = file.data()[i] == bytes[i];
        return same;
    }
};

TEST(MappedFile, ReleasePagesDropsWholePagesInsideTheRangeOnly) {
    constexpr size_t kPages = 32;
    Fixture f(kPages);
    ASSERT_EQ(f.file.size(), kPages * kPage);
    ASSERT_TRUE(f.read_all_equal());
    for (bool p : present(f.file.data(), kPages)) ASSERT_TRUE(p);

    // Bytes from the middle of page 4 to the middle of page 20: pages 5..19 are whole inside.
    const size_t begin = 4 * kPage + 100, end = 20 * kPage + 100;
    EXPECT_EQ(f.file.release_pages({f.file.data() + begin, end - begin}), 15 * kPage);
    const std::vector<bool> after = present(f.file.data(), kPages);
    for (size_t i = 0; i < kPages; ++i) EXPECT_EQ(after[i], i < 5 || i > 19) << "page " << i;

    // The mapping still reads the file's bytes (the pages fault back in).
    EXPECT_TRUE(f.read_all_equal());
    for (bool p : present(f.file.data(), kPages)) EXPECT_TRUE(p);
}

TEST(MappedFile, ReleasePagesIgnoresWhatIsNotWholePagesOfTheMapping) {
    constexpr size_t kPages = 8;
    Fixture f(kPages);
    ASSERT_TRUE(f.read_all_equal());
    const uint8_t* d = f.file.data();
    EXPECT_EQ(f.file.release_pages({d + 10, kPage - 20}), 0u);         // inside one page
    EXPECT_EQ(f.file.release_pages({d + kPage + 1, kPage}), 0u);       // across a boundary
    EXPECT_EQ(f.file.release_pages({d, 0}), 0u);                       // empty
    EXPECT_EQ(f.file.release_pages({f.bytes.data(), kPage * 4}), 0u);  // not this mapping
    for (bool p : present(d, kPages)) EXPECT_TRUE(p);
    // Clamped to the mapping: a range running past its end releases its last pages only.
    EXPECT_EQ(f.file.release_pages({d + 6 * kPage, 10 * kPage}), 2 * kPage);
    EXPECT_EQ(MappedFile().release_pages({d, kPage}), 0u);  // an empty MappedFile maps nothing
    EXPECT_TRUE(f.read_all_equal());
}

}  // namespace
}  // namespace pelican
