// Progress of a long job on stderr. On a terminal: one bar redrawn in place at most ~10 times a
// second ("[=====>    ]  42%  1.2/2.9 GB  3.1 s  blk.7.ffn_up.weight"). Otherwise (a log file,
// a pipe): a plain line every 10% or 10 s. Nothing is printed when disabled.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace pelican {

class Progress {
public:
    // total: units of work (bytes here); label: what is being done ("writing model.gguf").
    Progress(std::string label, uint64_t total, bool enabled = true);
    ~Progress();  // ends the line if one is open
    Progress(const Progress&) = delete;
    Progress& operator=(const Progress&) = delete;

    // Sets work done so far and what is in hand right now.
    void update(uint64_t done, std::string_view item = {});
    // Prints the final state (100%) and the elapsed time.
    void finish();
    double elapsed_s() const;

private:
    void draw(std::string_view item, bool final);

    std::string label_;
    uint64_t total_ = 0, done_ = 0;
    bool enabled_ = true, tty_ = false, open_line_ = false, finished_ = false;
    int last_decile_ = -1;
    std::chrono::steady_clock::time_point start_, last_draw_;
};

// "1.23 GB", "512 MB", "4.0 KB" (decimal units).
std::string format_bytes(uint64_t n);

}  // namespace pelican
