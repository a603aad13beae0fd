// A standalone process for one launch, for the sanitizer builds (AddressSanitizer, ThreadSanitizer, UBSan) and
// the barrier check: loading a sanitizer runtime into Python would need LD_PRELOAD. Usage: driver MANIFEST.
// The manifest, one item per line (written by impls/cuda/runtime/on_cpu.py):
//   entry N | grid X Y Z | block X Y Z | shared BYTES | blocks FIRST COUNT
//   ptr BYTES PATH   (a buffer of exactly BYTES, read from PATH and written back after the launch;
//                     PATH "-" for zero-filled and not written back)
//   i32 V | i64 V | f32 HEXFLOAT
// Diagnostics go to stderr as "cuda-cpu: LINE"; the exit status is cuda_cpu_launch's.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

extern "C" int cuda_cpu_launch(int entry, const unsigned* grid, const unsigned* block, std::size_t shared_bytes,
                               void** params, std::uint64_t first_block, std::uint64_t block_count,
                               char* diagnostics, std::size_t diagnostics_size);

namespace {
struct Buffer {
    void* data;
    std::size_t bytes;
    std::string path;
};

[[noreturn]] void fail(const std::string& why) {
    std::fprintf(stderr, "cuda-cpu driver: %s\n", why.c_str());
    std::exit(3);
}
}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) fail("usage: driver MANIFEST");
    std::ifstream manifest(argv[1]);
    if (!manifest) fail(std::string("cannot read ") + argv[1]);
    int entry = -1;
    unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
    std::size_t shared = 0;
    std::uint64_t first = 0, count = 0;
    std::vector<Buffer> buffers;
    std::vector<std::unique_ptr<std::uint64_t>> values;  // scalars and pointer variables, 8 bytes each
    std::vector<void*> params;
    std::string line;
    while (std::getline(manifest, line)) {
        std::istringstream in(line);
        std::string kind;
        in >> kind;
        if (kind == "entry") in >> entry;
        else if (kind == "grid") in >> grid[0] >> grid[1] >> grid[2];
        else if (kind == "block") in >> block[0] >> block[1] >> block[2];
        else if (kind == "shared") in >> shared;
        else if (kind == "blocks") in >> first >> count;
        else if (kind == "ptr") {
            Buffer b{nullptr, 0, ""};
            in >> b.bytes >> b.path;
            b.data = std::calloc(b.bytes ? b.bytes : 1, 1);
            if (b.path != "-") {
                std::ifstream content(b.path, std::ios::binary);
                if (!content.read(static_cast<char*>(b.data), static_cast<std::streamsize>(b.bytes)))
                    fail("cannot read " + std::to_string(b.bytes) + " bytes from " + b.path);
            }
            buffers.push_back(b);
            values.emplace_back(new std::uint64_t(0));
            std::memcpy(values.back().get(), &buffers.back().data, sizeof(void*));
            params.push_back(values.back().get());
        } else if (kind == "i32" || kind == "i64" || kind == "f32") {
            std::string text;
            in >> text;
            values.emplace_back(new std::uint64_t(0));
            void* slot = values.back().get();
            if (kind == "i32") { std::int32_t v = std::stoi(text); std::memcpy(slot, &v, 4); }
            else if (kind == "i64") { std::int64_t v = std::stoll(text); std::memcpy(slot, &v, 8); }
            else { float v = std::strtof(text.c_str(), nullptr); std::memcpy(slot, &v, 4); }
            params.push_back(slot);
        } else if (!kind.empty()) {
            fail("unknown manifest line: " + line);
        }
    }
    std::vector<char> diagnostics(1 << 16);
    int status = cuda_cpu_launch(entry, grid, block, shared, params.data(), first, count, diagnostics.data(),
                                 diagnostics.size());
    std::istringstream lines(diagnostics.data());
    while (std::getline(lines, line)) std::fprintf(stderr, "cuda-cpu: %s\n", line.c_str());
    for (const auto& b : buffers) {
        if (b.path == "-") continue;
        std::ofstream out(b.path, std::ios::binary | std::ios::trunc);
        out.write(static_cast<const char*>(b.data), static_cast<std::streamsize>(b.bytes));
    }
    for (const auto& b : buffers) std::free(b.data);
    return status;
}
