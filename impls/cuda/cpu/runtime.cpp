// The scheduler behind cuda_cpu.h: runs a launch block after block, the threads of a block as fibers on one OS
// thread, with counting barriers that record divergence and detect deadlock. Entry point: cuda_cpu_run, called
// by the generated launch table (cpu_build.py).
//
// Under a sanitizer the fibers are announced to it. ThreadSanitizer (CUDA_CPU_TSAN) keeps one thread state
// per fiber, ignores the scheduler's own bookkeeping (which every fiber touches: RuntimeCode), and is told
// that a switch orders nothing: the only happens-before edges between the kernel's threads are the ones the
// barriers declare (every arrival releases, every departure acquires) and the start and end of each block, so
// two threads that touch the same word with no barrier between are a race however the scheduler happened to
// order them. AddressSanitizer (CUDA_CPU_ASAN) is told which stack runs. One OS thread instead of one per CUDA
// thread: no context switch through the kernel, no lock per barrier.
#include "cuda_cpu.h"

#include <sys/mman.h>
#include <ucontext.h>

#include <algorithm>
#include <cstdio>
#include <deque>
#include <memory>
#include <new>
#include <set>
#include <string>
#include <vector>

#ifdef CUDA_CPU_TSAN
#include <sanitizer/tsan_interface.h>
#endif
#ifdef CUDA_CPU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

namespace cuda_cpu {

LaunchState launch_state;
ThreadState* current_thread = nullptr;

namespace {

constexpr unsigned kWarp = 32;
constexpr std::size_t kFiberStack = 256 * 1024;
constexpr std::size_t kMaxDiagnostics = 16;

struct Abort {};  // thrown inside a thread's code when its launch is aborted (deadlock)

#ifdef CUDA_CPU_TSAN
extern "C" {  // ThreadSanitizer's annotations (libtsan), per thread state: here, per fiber
void AnnotateIgnoreReadsBegin(const char* file, int line);
void AnnotateIgnoreReadsEnd(const char* file, int line);
void AnnotateIgnoreWritesBegin(const char* file, int line);
void AnnotateIgnoreWritesEnd(const char* file, int line);
}
#endif

// While one lives, ThreadSanitizer does not watch the running fiber's accesses (allocations included): the
// scheduler's state, shared by every fiber of the one OS thread, is ordered by the scheduler, not by barriers.
struct RuntimeCode {
#ifdef CUDA_CPU_TSAN
    RuntimeCode() {
        AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
        AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
    }
    ~RuntimeCode() {
        AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
        AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
    }
    RuntimeCode(const RuntimeCode&) = delete;
    RuntimeCode& operator=(const RuntimeCode&) = delete;
#endif
};

// Happens-before edges for ThreadSanitizer (no-ops otherwise): `release` at an address, then `acquire` there.
inline void release(void* at) {
#ifdef CUDA_CPU_TSAN
    __tsan_release(at);
#else
    (void)at;
#endif
}
inline void acquire(void* at) {
#ifdef CUDA_CPU_TSAN
    __tsan_acquire(at);
#else
    (void)at;
#endif
}

std::string where(Site site) {
    const char* slash = std::strrchr(site.file, '/');
    return std::string(slash ? slash + 1 : site.file) + ":" + std::to_string(site.line);
}

// The call sites that reached a barrier in one generation, as (file, line); named only for a diagnostic, so an
// arrival costs a comparison, not a string.
struct Sites {
    std::vector<Site> list;
    void add(Site site) {
        for (const Site& s : list)
            if (s.line == site.line && (s.file == site.file || std::strcmp(s.file, site.file) == 0)) return;
        list.push_back(site);
    }
    std::set<std::string> names() const {
        std::set<std::string> out;
        for (const Site& s : list) out.insert(where(s));
        return out;
    }
    void clear() { list.clear(); }
};

// A barrier over a group of threads (a block, or the lanes of a warp) that counts only the threads still
// running: it releases when every live member has arrived.
// The arrivals of one generation release at sync[generation % 2] and its departures acquire there: a thread
// can arrive at the next generation before the last one departed from this, never two generations on.
struct Barrier {
    unsigned arrived = 0;
    unsigned long generation = 0;
    Sites sites;
    char sync[2] = {};
};

struct Warp {
    Barrier barrier;
    unsigned live = 0;
    unsigned live_mask = 0;  // lanes that have not returned
    unsigned arrived_mask = 0;
    std::uint64_t slots[2][kWarp] = {};
    unsigned char parity[kWarp] = {};  // which slot set each lane publishes into next
};


struct Block {
    unsigned threads = 0;
    unsigned live = 0;
    Barrier barrier;
    std::deque<Warp> warps;  // not a vector: a condition variable does not move
    std::vector<ThreadState> states;
    bool aborted = false;
    unsigned long events = 0;  // barrier releases and exits: progress, for deadlock detection
    std::vector<std::string>* diagnostics = nullptr;
    // Each fiber starts once through makecontext. The sanitizer builds switch with swapcontext, which the
    // sanitizers follow, and every switch goes through the scheduler. The plain build passes control from a
    // thread that waits (or has finished) straight to the next thread that can run, in the order a scheduler
    // pass would take, and back to the scheduler only when none can; it switches with GCC's
    // __builtin_setjmp/__builtin_longjmp, which save only the frame, stack and resume addresses (no signal mask
    // system call, no cleanup-handler walk).
    ucontext_t scheduler{};
    struct Jump { void* at[5]; };
    Jump scheduler_jump;
    std::vector<ucontext_t> contexts;
    std::vector<Jump> jumps;
    std::vector<bool> started;
    std::vector<std::unique_ptr<char[]>>* stacks = nullptr;
    std::vector<void*>* sanitizer_fibers = nullptr;  // ThreadSanitizer's state of each thread, kept across blocks
    void* scheduler_fiber = nullptr;
    const void* scheduler_stack = nullptr;  // AddressSanitizer: the scheduler's stack
    std::size_t scheduler_stack_size = 0;
    std::vector<bool> finished;
    unsigned unfinished = 0;
    std::vector<const Barrier*> waiting_on;  // per thread: the barrier it waits at, or null
    std::vector<unsigned long> waiting_generation;
    unsigned running = 0;

    void note(const std::string& message) {
        if (diagnostics->size() < kMaxDiagnostics &&
            std::find(diagnostics->begin(), diagnostics->end(), message) == diagnostics->end())
            diagnostics->push_back(message);
    }

    std::string block_name() const {
        const uint3& b = launch_state.block_idx;
        return "block (" + std::to_string(b.x) + "," + std::to_string(b.y) + "," + std::to_string(b.z) + ")";
    }

    void release(Barrier& b, const char* what) {
        const bool several = &b == &barrier && b.sites.list.size() > 1;  // threads at different __syncthreads() calls
        std::set<std::string> names = several ? b.sites.names() : std::set<std::string>{};
        if (names.size() > 1) {
            std::string list;
            for (const auto& s : names) list += (list.empty() ? "" : " and ") + s;
            note(std::string("barrier divergence: threads of ") + block_name() + " met at different " + what +
                 " calls (" + list + ")");
        }
        b.arrived = 0;
        b.sites.clear();
        ++b.generation;
        ++events;
    }

    std::string deadlock() const {
        std::set<std::string> sites = barrier.sites.names();
        for (const auto& w : warps) sites.merge(w.barrier.sites.names());
        std::string list;
        for (const auto& s : sites) list += (list.empty() ? "" : ", ") + s;
        return "deadlock: in " + block_name() + " every running thread waits and no barrier can release (waiting at " +
               list + ")";
    }

    // From the running thread's fiber back to the scheduler, until the scheduler resumes it.
    void yield() {
#ifdef CUDA_CPU_SANITIZED
        to_scheduler(true);
#else
        if (__builtin_setjmp(jumps[running].at) == 0) leave();
#endif
    }

#ifndef CUDA_CPU_SANITIZED
    // Into thread t's fiber, where it last yielded (or at its start); never returns.
    [[noreturn]] __attribute__((noinline)) void enter(unsigned t) {
        running = t;
        current_thread = &states[t];
        if (started[t]) __builtin_longjmp(jumps[t].at, 1);
        started[t] = true;
        setcontext(&contexts[t]);
        __builtin_unreachable();
    }

    // From the running thread, which waits or has finished, to the next thread in turn that can run, or to
    // the scheduler when none can (every thread finished, or a deadlock).
    [[noreturn]] __attribute__((noinline)) void leave() {
        for (unsigned step = 1; step <= threads; ++step) {
            unsigned t = (running + step) % threads;
            if (can_run(t)) enter(t);
        }
        __builtin_longjmp(scheduler_jump.at, 1);
    }
#endif

#ifdef CUDA_CPU_SANITIZED
    // The sanitizer builds' switch from the running fiber to the scheduler (`resumable`: it will run again).
    void to_scheduler(bool resumable) {
#ifdef CUDA_CPU_TSAN
        __tsan_switch_to_fiber(scheduler_fiber, __tsan_switch_to_fiber_no_sync);
#endif
#ifdef CUDA_CPU_ASAN
        void* fake_stack = nullptr;
        __sanitizer_start_switch_fiber(resumable ? &fake_stack : nullptr, scheduler_stack, scheduler_stack_size);
#endif
        swapcontext(&contexts[running], &scheduler);
#ifdef CUDA_CPU_ASAN
        __sanitizer_finish_switch_fiber(fake_stack, &scheduler_stack, &scheduler_stack_size);
#endif
        (void)resumable;
    }
#endif

    // Until `b` releases `generation`; the scheduler does not resume this fiber before (waiting_on).
    void wait_for(const Barrier& b, unsigned long generation) {
        waiting_on[running] = &b;
        waiting_generation[running] = generation;
        while (b.generation == generation) {
            if (aborted) break;
            yield();
        }
        waiting_on[running] = nullptr;
        if (aborted) throw Abort{};
    }

    bool can_run(unsigned t) const {
        return !finished[t] && (aborted || waiting_on[t] == nullptr || waiting_on[t]->generation != waiting_generation[t]);
    }

    void sync_block(Site site) {
        barrier.sites.add(site);
        ++barrier.arrived;
        unsigned long generation = barrier.generation;
        char* sync = &barrier.sync[generation % 2];
        cuda_cpu::release(sync);
        if (barrier.arrived == live) {
            release(barrier, "__syncthreads()");
        } else {
            wait_for(barrier, generation);
        }
        acquire(sync);
    }

    void sync_warp(unsigned mask, Site site) {
        Warp& w = warps[current_thread->linear / kWarp];
        unsigned lane_bit = 1u << (current_thread->linear % kWarp);
        if (!(mask & lane_bit))
            note("warp barrier misuse: a lane called a warp-synchronous function with a mask that excludes it (" +
                 where(site) + ")");
        w.barrier.sites.add(site);
        w.arrived_mask |= lane_bit;
        unsigned long generation = w.barrier.generation;
        char* sync = &w.barrier.sync[generation % 2];
        cuda_cpu::release(sync);
        if ((w.arrived_mask & w.live_mask & mask) == (w.live_mask & mask)) {
            if ((mask & ~w.live_mask) != 0u)
                note("barrier divergence: lanes of a warp in " + block_name() +
                     " returned before a warp-synchronous call that names them (" + where(site) + ")");
            w.arrived_mask = 0;
            release(w.barrier, "warp-synchronous");
        } else {
            wait_for(w.barrier, generation);
        }
        acquire(sync);
    }

    void exit_thread() {
        --live;
        Warp& w = warps[current_thread->linear / kWarp];
        --w.live;
        w.live_mask &= ~(1u << (current_thread->linear % kWarp));
        ++events;
        if (barrier.arrived > 0) {
            note("barrier divergence: a thread of " + block_name() + " returned while " +
                 std::to_string(barrier.arrived) + " threads waited at __syncthreads() (" + *barrier.sites.names().begin() +
                 ")");
            if (barrier.arrived == live) release(barrier, "__syncthreads()");
        }
        if (w.arrived_mask && (w.arrived_mask & w.live_mask) == w.live_mask) {
            note("barrier divergence: a lane of a warp in " + block_name() +
                 " returned while the others waited at a warp-synchronous call (" + *w.barrier.sites.names().begin() + ")");
            w.arrived_mask = 0;
            release(w.barrier, "warp-synchronous");
        }
    }
};

Block* the_block = nullptr;
Invoke the_invoke = nullptr;
void** the_params = nullptr;
// ThreadSanitizer: the host before a block happens before its threads start, their ends before the host goes
// on; two addresses, so that one thread's end orders nothing in a thread of the same block
char block_start = 0, block_end = 0;

void run_thread(unsigned linear) {
    acquire(&block_start);
    try {
        the_invoke(the_params);
        RuntimeCode runtime;
        the_block->exit_thread();
    } catch (const Abort&) {
        RuntimeCode runtime;
        --the_block->live;
    }
    release(&block_end);
}

void fiber_entry(unsigned linear) {
#ifdef CUDA_CPU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &the_block->scheduler_stack, &the_block->scheduler_stack_size);
#endif
    run_thread(linear);
    {
        RuntimeCode runtime;  // ended before the switch: this fiber's code never resumes
        the_block->finished[linear] = true;
        --the_block->unfinished;
    }
#ifdef CUDA_CPU_SANITIZED
    the_block->to_scheduler(false);
#else
    the_block->leave();
#endif
}

// From the scheduler to thread t's fiber, until control comes back: in the sanitizer builds when t yields or
// finishes, in the plain build when no thread can run.
void resume(Block& block, unsigned t) {
#ifdef CUDA_CPU_SANITIZED
    block.running = t;
    current_thread = &block.states[t];
    block.started[t] = true;
#ifdef CUDA_CPU_TSAN
    __tsan_switch_to_fiber((*block.sanitizer_fibers)[t], __tsan_switch_to_fiber_no_sync);
#endif
#ifdef CUDA_CPU_ASAN
    void* fake_stack = nullptr;
    __sanitizer_start_switch_fiber(&fake_stack, (*block.stacks)[t].get(), kFiberStack);
#endif
    swapcontext(&block.scheduler, &block.contexts[t]);
#ifdef CUDA_CPU_ASAN
    __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#endif
#else
    if (__builtin_setjmp(block.scheduler_jump.at) == 0) block.enter(t);
#endif
}

void run_fibers(Block& block) {
    for (unsigned t = 0; t < block.threads; ++t) {
#ifdef CUDA_CPU_ASAN
        __asan_unpoison_memory_region((*block.stacks)[t].get(), kFiberStack);  // frames a past block left
#endif
        getcontext(&block.contexts[t]);
        block.contexts[t].uc_stack.ss_sp = (*block.stacks)[t].get();
        block.contexts[t].uc_stack.ss_size = kFiberStack;
        block.contexts[t].uc_link = nullptr;
        makecontext(&block.contexts[t], reinterpret_cast<void (*)()>(fiber_entry), 1, t);
    }
    block.unfinished = block.threads;
    while (block.unfinished > 0) {
        unsigned long before = block.events;
        unsigned unfinished_before = block.unfinished;
        for (unsigned t = 0; t < block.threads; ++t) {
            if (!block.can_run(t)) continue;  // finished, or its barrier has not released
            resume(block, t);
        }
        if (block.unfinished > 0 && block.events == before && block.unfinished == unfinished_before &&
            !block.aborted) {
            block.note(block.deadlock());
            block.aborted = true;
        }
    }
}

}  // namespace

void sync_block(Site site) {
    RuntimeCode runtime;
    the_block->sync_block(site);
}

void sync_warp(unsigned mask, Site site) {
    RuntimeCode runtime;
    the_block->sync_warp(mask, site);
}

// Lanes publish into one of two slot sets, alternating per exchange, with one warp barrier between publishing
// and reading: a lane can publish into a set again only after the next exchange's barrier, which every lane
// reaches only after reading this one, so a second barrier is not needed.
std::uint64_t* publish(std::uint64_t value) {
    Warp& w = the_block->warps[current_thread->linear / kWarp];
    unsigned lane = current_thread->linear % kWarp;
    std::uint64_t* slots = w.slots[w.parity[lane]];
    w.parity[lane] ^= 1u;
    slots[lane] = value;
    return slots;
}

std::uint64_t exchange(unsigned mask, std::uint64_t value, unsigned source, Site site) {
    RuntimeCode runtime;
    std::uint64_t* slots = publish(value);
    sync_warp(mask, site);
    return slots[source % kWarp];
}

unsigned ballot(unsigned mask, bool predicate, Site site) {
    RuntimeCode runtime;
    std::uint64_t* slots = publish(predicate ? 1 : 0);
    sync_warp(mask, site);
    const Warp& w = the_block->warps[current_thread->linear / kWarp];
    unsigned bits = 0;
    for (unsigned lane = 0; lane < kWarp; ++lane)
        if ((mask & w.live_mask & (1u << lane)) && slots[lane]) bits |= 1u << lane;
    return bits;
}

bool first_live_lane_of_warp() {
    RuntimeCode runtime;
    const Warp& w = the_block->warps[current_thread->linear / kWarp];
    return (current_thread->linear % kWarp) == static_cast<unsigned>(__builtin_ctz(w.live_mask));
}

}  // namespace cuda_cpu

namespace cuda_cpu {

#ifdef CUDA_CPU_SANITIZED
// The launch's dynamic shared memory, exactly its size: AddressSanitizer reports an access past it.
class SharedWindow {
  public:
    explicit SharedWindow(std::size_t bytes) : bytes_(std::max<std::size_t>(bytes, 1)) {}
    unsigned char* data() { return bytes_.data(); }
    void fill(unsigned char) {}

  private:
    std::vector<unsigned char> bytes_;
};
#else
// The launch's dynamic shared memory at the start of kSharedReach bytes of zero pages (mapped lazily, nothing
// committed until written): a read past the launch's bytes (a kernel bug, which the memcheck build reports) reads
// zeros, the same in every run, instead of whatever the heap holds past a buffer of its exact size, which crashed
// the process or not depending on what the process had allocated before.
class SharedWindow {
  public:
    static constexpr std::size_t kSharedReach = std::size_t(1) << 30;
    explicit SharedWindow(std::size_t bytes) : bytes_(bytes) {
        void* mapped = mmap(nullptr, kSharedReach, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (mapped == MAP_FAILED) throw std::bad_alloc();
        base_ = static_cast<unsigned char*>(mapped);
    }
    ~SharedWindow() { munmap(base_, kSharedReach); }
    SharedWindow(const SharedWindow&) = delete;
    SharedWindow& operator=(const SharedWindow&) = delete;
    unsigned char* data() { return base_; }
    void fill(unsigned char value) { std::memset(base_, value, bytes_); }

  private:
    std::size_t bytes_;
    unsigned char* base_;
};
#endif

}  // namespace cuda_cpu

#ifndef CUDA_CPU_SANITIZED
extern "C" char __start_cuda_cpu_shared[] __attribute__((weak));
extern "C" char __stop_cuda_cpu_shared[] __attribute__((weak));
#endif

// Run blocks [first_block, first_block + block_count) of the launch (all of them when block_count is 0).
// Returns 0, or 1 when a block deadlocked (the launch stops there), 2 for an invalid configuration; the
// diagnostics are written to `diagnostics` as lines.
extern "C" int cuda_cpu_run(cuda_cpu::Invoke invoke, const unsigned* grid, const unsigned* block,
                            std::size_t shared_bytes, void** params, std::uint64_t first_block,
                            std::uint64_t block_count, char* diagnostics, std::size_t diagnostics_size) {
    using namespace cuda_cpu;
    RuntimeCode runtime;  // the host's fiber runs only the scheduler from here on
    std::vector<std::string> notes;
    auto report = [&](int status) {
        std::string text;
        for (const auto& n : notes) text += n + "\n";
        std::snprintf(diagnostics, diagnostics_size, "%s", text.c_str());
        return status;
    };
    std::uint64_t threads = std::uint64_t(block[0]) * block[1] * block[2];
    if (threads == 0 || threads > 1024 || block[2] > 64) {
        notes.push_back("invalid configuration: a block has " + std::to_string(threads) +
                        " threads (1 to 1024, z at most 64)");
        return report(2);
    }
    if (shared_bytes > 227 * 1024) {
        notes.push_back("invalid configuration: " + std::to_string(shared_bytes) +
                        " bytes of dynamic shared memory (at most 227 KB, sm_90)");
        return report(2);
    }
    launch_state.grid = dim3(grid[0], grid[1], grid[2]);
    launch_state.block = dim3(block[0], block[1], block[2]);
    SharedWindow shared(shared_bytes);
    launch_state.dynamic_shared = shared_bytes ? shared.data() : nullptr;
    std::vector<std::unique_ptr<char[]>> stacks;
    for (std::uint64_t t = 0; t < threads; ++t) stacks.emplace_back(new char[kFiberStack]);
    std::vector<void*> sanitizer_fibers;
#ifdef CUDA_CPU_TSAN
    for (std::uint64_t t = 0; t < threads; ++t) sanitizer_fibers.push_back(__tsan_create_fiber(0));
#endif
    the_invoke = invoke;
    the_params = params;
    int status = 0;
    std::uint64_t total = std::uint64_t(grid[0]) * grid[1] * grid[2];
    std::uint64_t last = block_count ? std::min(total, first_block + block_count) : total;
    for (std::uint64_t index = first_block; index < last; ++index) {
        launch_state.block_idx = uint3{unsigned(index % grid[0]), unsigned(index / grid[0] % grid[1]),
                                       unsigned(index / (std::uint64_t(grid[0]) * grid[1]))};
        Block b;
        b.threads = b.live = unsigned(threads);
        b.diagnostics = &notes;
        for (std::uint64_t w = 0; w < (threads + 31) / 32; ++w) b.warps.emplace_back();
        b.states.resize(threads);
        for (unsigned t = 0; t < threads; ++t) {
            b.states[t].linear = t;
            b.states[t].idx = uint3{t % block[0], t / block[0] % block[1], t / (block[0] * block[1])};
            b.warps[t / 32].live += 1;
            b.warps[t / 32].live_mask |= 1u << (t % 32);
        }
#ifndef CUDA_CPU_SANITIZED
        shared.fill(0xFF);
        if (__start_cuda_cpu_shared != nullptr)
            std::memset(__start_cuda_cpu_shared, 0xFF, __stop_cuda_cpu_shared - __start_cuda_cpu_shared);
#endif
        the_block = &b;
        b.contexts.resize(threads);
        b.jumps.resize(threads);
        b.started.assign(threads, false);
        b.finished.assign(threads, false);
        b.waiting_on.assign(threads, nullptr);
        b.waiting_generation.assign(threads, 0);
        b.stacks = &stacks;
        b.sanitizer_fibers = &sanitizer_fibers;
#ifdef CUDA_CPU_TSAN
        b.scheduler_fiber = __tsan_get_current_fiber();
#endif
        release(&block_start);
        run_fibers(b);
        acquire(&block_end);
        the_block = nullptr;
        if (b.aborted) {
            status = 1;
            break;
        }
    }
#ifdef CUDA_CPU_TSAN
    for (void* fiber : sanitizer_fibers) __tsan_destroy_fiber(fiber);
#endif
    return report(status);
}
