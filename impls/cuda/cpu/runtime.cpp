// The scheduler behind cuda_cpu.h: runs a launch block after block, the threads of a block as fibers (plain
// build) or as OS threads (CUDA_CPU_SANITIZED), with counting barriers that record divergence and detect
// deadlock. Entry point: cuda_cpu_run, called by the generated launch table (cpu_build.py).
#include "cuda_cpu.h"

#include <setjmp.h>
#include <ucontext.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace cuda_cpu {

LaunchState launch_state;
thread_local ThreadState* current_thread = nullptr;

namespace {

constexpr unsigned kWarp = 32;
constexpr std::size_t kFiberStack = 256 * 1024;
constexpr std::size_t kMaxDiagnostics = 16;

struct Abort {};  // thrown inside a thread's code when its launch is aborted (deadlock)

std::string where(Site site) {
    const char* slash = std::strrchr(site.file, '/');
    return std::string(slash ? slash + 1 : site.file) + ":" + std::to_string(site.line);
}

// A barrier over a group of threads (a block, or the lanes of a warp) that counts only the threads still
// running: it releases when every live member has arrived.
struct Barrier {
    unsigned arrived = 0;
    unsigned long generation = 0;
    std::set<std::string> sites;
};

struct Warp {
    Barrier barrier;
    std::condition_variable changed;  // OS threads: only the warp's lanes wake for its barriers
    unsigned live = 0;
    unsigned live_mask = 0;  // lanes that have not returned
    unsigned arrived_mask = 0;
    std::uint64_t slots[2][kWarp] = {};
    unsigned char parity[kWarp] = {};  // which slot set each lane publishes into next
};


// How the threads of a block wait: fibers yield to the scheduler, OS threads sleep on a condition variable.
struct Block {
    unsigned threads = 0;
    unsigned live = 0;
    Barrier barrier;
    std::deque<Warp> warps;  // not a vector: a condition variable does not move
    std::vector<ThreadState> states;
    bool aborted = false;
    unsigned long events = 0;  // barrier releases and exits: progress, for deadlock detection
    std::vector<std::string>* diagnostics = nullptr;
    bool fibers = true;
    // fibers: each starts once through makecontext/swapcontext, then switches with _setjmp/_longjmp, which
    // (unlike swapcontext) do not save and restore the signal mask with a system call on every switch
    ucontext_t scheduler{};
    jmp_buf scheduler_jump;
    std::vector<ucontext_t> contexts;
    struct Jump { jmp_buf at; };
    std::vector<Jump> jumps;
    std::vector<bool> started;
    std::vector<std::unique_ptr<char[]>>* stacks = nullptr;
    std::vector<bool> finished;
    unsigned running = 0;
    // OS threads
    std::mutex mutex;
    std::condition_variable changed;
    unsigned waiting = 0;
    unsigned at_start = 0;
    std::mutex gate_mutex;
    std::condition_variable gate;

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
        if (&b == &barrier && b.sites.size() > 1) {
            std::string list;
            for (const auto& s : b.sites) list += (list.empty() ? "" : " and ") + s;
            note(std::string("barrier divergence: threads of ") + block_name() + " met at different " + what +
                 " calls (" + list + ")");
        }
        b.arrived = 0;
        b.sites.clear();
        ++b.generation;
        ++events;
    }

    std::string deadlock() const {
        std::set<std::string> sites(barrier.sites);
        for (const auto& w : warps) sites.insert(w.barrier.sites.begin(), w.barrier.sites.end());
        std::string list;
        for (const auto& s : sites) list += (list.empty() ? "" : ", ") + s;
        return "deadlock: in " + block_name() + " every running thread waits and no barrier can release (waiting at " +
               list + ")";
    }

    template <typename Done>
    void wait_until(std::unique_lock<std::mutex>& lock, std::condition_variable& wake, Done done) {
        if (fibers) {
            while (!done()) {
                if (aborted) throw Abort{};
                if (!_setjmp(jumps[running].at)) _longjmp(scheduler_jump, 1);
            }
        } else {
            ++waiting;
            auto last_events = events;
            auto since = std::chrono::steady_clock::now();
            while (!done()) {
                if (aborted) { --waiting; throw Abort{}; }
                wake.wait_for(lock, std::chrono::milliseconds(20));
                if (events != last_events) {
                    last_events = events;
                    since = std::chrono::steady_clock::now();
                } else if (waiting == live && std::chrono::steady_clock::now() - since > std::chrono::seconds(2)) {
                    note(deadlock());
                    aborted = true;
                    notify_everyone();
                }
            }
            --waiting;
        }
        if (aborted) throw Abort{};
    }

    std::unique_lock<std::mutex> lock() {
        return fibers ? std::unique_lock<std::mutex>() : std::unique_lock<std::mutex>(mutex);
    }

    void sync_block(Site site) {
        auto held = lock();
        barrier.sites.insert(where(site));
        ++barrier.arrived;
        unsigned long generation = barrier.generation;
        if (barrier.arrived == live) {
            release(barrier, "__syncthreads()");
            changed.notify_all();
            return;
        }
        wait_until(held, changed, [&] { return barrier.generation != generation; });
    }

    void sync_warp(unsigned mask, Site site) {
        auto held = lock();
        Warp& w = warps[current_thread->linear / kWarp];
        unsigned lane_bit = 1u << (current_thread->linear % kWarp);
        if (!(mask & lane_bit))
            note("warp barrier misuse: a lane called a warp-synchronous function with a mask that excludes it (" +
                 where(site) + ")");
        w.barrier.sites.insert(where(site));
        w.arrived_mask |= lane_bit;
        unsigned long generation = w.barrier.generation;
        if ((w.arrived_mask & w.live_mask & mask) == (w.live_mask & mask)) {
            if ((mask & ~w.live_mask) != 0u)
                note("barrier divergence: lanes of a warp in " + block_name() +
                     " returned before a warp-synchronous call that names them (" + where(site) + ")");
            w.arrived_mask = 0;
            release(w.barrier, "warp-synchronous");
            w.changed.notify_all();
            return;
        }
        wait_until(held, w.changed, [&] { return w.barrier.generation != generation; });
    }

    void exit_thread() {
        auto held = lock();
        --live;
        Warp& w = warps[current_thread->linear / kWarp];
        --w.live;
        w.live_mask &= ~(1u << (current_thread->linear % kWarp));
        ++events;
        if (barrier.arrived > 0) {
            note("barrier divergence: a thread of " + block_name() + " returned while " +
                 std::to_string(barrier.arrived) + " threads waited at __syncthreads() (" + *barrier.sites.begin() +
                 ")");
            if (barrier.arrived == live) release(barrier, "__syncthreads()");
        }
        if (w.arrived_mask && (w.arrived_mask & w.live_mask) == w.live_mask) {
            note("barrier divergence: a lane of a warp in " + block_name() +
                 " returned while the others waited at a warp-synchronous call (" + *w.barrier.sites.begin() + ")");
            w.arrived_mask = 0;
            release(w.barrier, "warp-synchronous");
        }
        notify_everyone();
    }

    // OS threads: no thread runs kernel code before every thread of the block has started. Otherwise a thread
    // could run the whole kernel, then take the runtime's locks on its way out, before another thread takes
    // them on its way in: an ordering no GPU gives, which would hide a race from ThreadSanitizer.
    // The gate has a lock of its own: a thread waking from it must not take a lock that another thread took
    // after its kernel code (on its way out), which would order that code before this thread's.
    void start_together() {
        std::unique_lock<std::mutex> held(gate_mutex);
        if (++at_start == threads) gate.notify_all();
        gate.wait(held, [this] { return at_start == threads; });
    }

    void notify_everyone() {
        if (fibers) return;
        changed.notify_all();
        for (auto& w : warps) w.changed.notify_all();
    }
};

Block* the_block = nullptr;
Invoke the_invoke = nullptr;
void** the_params = nullptr;

void run_thread(unsigned linear) {
    current_thread = &the_block->states[linear];
    if (!the_block->fibers) the_block->start_together();
    try {
        the_invoke(the_params);
        the_block->exit_thread();
    } catch (const Abort&) {
        auto held = the_block->lock();
        --the_block->live;
    }
}

void fiber_entry(unsigned linear) {
    run_thread(linear);
    the_block->finished[linear] = true;
    _longjmp(the_block->scheduler_jump, 1);
}

void run_fibers(Block& block) {
    for (unsigned t = 0; t < block.threads; ++t) {
        getcontext(&block.contexts[t]);
        block.contexts[t].uc_stack.ss_sp = (*block.stacks)[t].get();
        block.contexts[t].uc_stack.ss_size = kFiberStack;
        block.contexts[t].uc_link = nullptr;
        makecontext(&block.contexts[t], reinterpret_cast<void (*)()>(fiber_entry), 1, t);
    }
    unsigned remaining = block.threads;
    while (remaining > 0) {
        unsigned long before = block.events;
        bool started = false;
        for (unsigned t = 0; t < block.threads; ++t) {
            if (block.finished[t]) continue;
            block.running = t;
            current_thread = &block.states[t];
            if (!_setjmp(block.scheduler_jump)) {
                if (block.started[t]) _longjmp(block.jumps[t].at, 1);
                block.started[t] = true;
                swapcontext(&block.scheduler, &block.contexts[t]);
            }
            if (block.finished[t]) --remaining, started = true;
        }
        if (remaining > 0 && block.events == before && !started && !block.aborted) {
            block.note(block.deadlock());
            block.aborted = true;
        }
    }
}

// The OS threads of a launch, made once and reused block after block (a thread is costly to create under the
// sanitizers): the main thread publishes each block and waits until every thread has run it.
class ThreadPool {
  public:
    explicit ThreadPool(unsigned count) : count_(count) {
        for (unsigned t = 0; t < count; ++t) threads_.emplace_back([this, t] { serve(t); });
    }
    ~ThreadPool() {
        {
            std::lock_guard<std::mutex> held(mutex_);
            stopping_ = true;
        }
        changed_.notify_all();
        for (auto& thread : threads_) thread.join();
    }
    void run_block() {
        std::unique_lock<std::mutex> held(mutex_);
        finished_ = 0;
        ++generation_;
        changed_.notify_all();
        changed_.wait(held, [this] { return finished_ == count_; });
    }

  private:
    void serve(unsigned linear) {
        unsigned long seen = 0;
        for (;;) {
            {
                std::unique_lock<std::mutex> held(mutex_);
                changed_.wait(held, [&] { return stopping_ || generation_ != seen; });
                if (stopping_) return;
                seen = generation_;
            }
            run_thread(linear);
            std::lock_guard<std::mutex> held(mutex_);
            if (++finished_ == count_) changed_.notify_all();
        }
    }
    unsigned count_;
    std::mutex mutex_;
    std::condition_variable changed_;
    unsigned long generation_ = 0;
    unsigned finished_ = 0;
    bool stopping_ = false;
    std::vector<std::thread> threads_;
};

}  // namespace

void sync_block(Site site) { the_block->sync_block(site); }
void sync_warp(unsigned mask, Site site) { the_block->sync_warp(mask, site); }

// Lanes publish into one of two slot sets, alternating per exchange, with one warp barrier between publishing
// and reading: a lane can publish into a set again only after the next exchange's barrier, which every lane
// reaches only after reading this one, so a second barrier is not needed.
std::uint64_t* publish(std::uint64_t value) {
    Warp& w = the_block->warps[current_thread->linear / kWarp];
    unsigned lane = current_thread->linear % kWarp;
    auto held = the_block->lock();
    std::uint64_t* slots = w.slots[w.parity[lane]];
    w.parity[lane] ^= 1u;
    slots[lane] = value;
    return slots;
}

std::uint64_t exchange(unsigned mask, std::uint64_t value, unsigned source, Site site) {
    std::uint64_t* slots = publish(value);
    sync_warp(mask, site);
    auto held = the_block->lock();
    return slots[source % kWarp];
}

unsigned ballot(unsigned mask, bool predicate, Site site) {
    std::uint64_t* slots = publish(predicate ? 1 : 0);
    sync_warp(mask, site);
    auto held = the_block->lock();
    const Warp& w = the_block->warps[current_thread->linear / kWarp];
    unsigned bits = 0;
    for (unsigned lane = 0; lane < kWarp; ++lane)
        if ((mask & w.live_mask & (1u << lane)) && slots[lane]) bits |= 1u << lane;
    return bits;
}

bool first_live_lane_of_warp() {
    auto held = the_block->lock();
    const Warp& w = the_block->warps[current_thread->linear / kWarp];
    return (current_thread->linear % kWarp) == static_cast<unsigned>(__builtin_ctz(w.live_mask));
}

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
    std::vector<unsigned char> shared(std::max<std::size_t>(shared_bytes, 1));
    launch_state.dynamic_shared = shared_bytes ? shared.data() : nullptr;
#ifdef CUDA_CPU_SANITIZED
    const bool fibers = false;
#else
    const bool fibers = true;
#endif
    std::vector<std::unique_ptr<char[]>> stacks;
    if (fibers)
        for (std::uint64_t t = 0; t < threads; ++t) stacks.emplace_back(new char[256 * 1024]);
    the_invoke = invoke;
    the_params = params;
    std::unique_ptr<ThreadPool> pool(fibers ? nullptr : new ThreadPool(unsigned(threads)));
    std::uint64_t total = std::uint64_t(grid[0]) * grid[1] * grid[2];
    std::uint64_t last = block_count ? std::min(total, first_block + block_count) : total;
    for (std::uint64_t index = first_block; index < last; ++index) {
        launch_state.block_idx = uint3{unsigned(index % grid[0]), unsigned(index / grid[0] % grid[1]),
                                       unsigned(index / (std::uint64_t(grid[0]) * grid[1]))};
        Block b;
        b.threads = b.live = unsigned(threads);
        b.fibers = fibers;
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
        std::fill(shared.begin(), shared.end(), 0xFF);
        if (__start_cuda_cpu_shared != nullptr)
            std::memset(__start_cuda_cpu_shared, 0xFF, __stop_cuda_cpu_shared - __start_cuda_cpu_shared);
#endif
        the_block = &b;
        if (fibers) {
            b.contexts.resize(threads);
            b.jumps.resize(threads);
            b.started.assign(threads, false);
            b.finished.assign(threads, false);
            b.stacks = &stacks;
            run_fibers(b);
        } else {
            pool->run_block();
        }
        the_block = nullptr;
        if (b.aborted) return report(1);
    }
    return report(0);
}
