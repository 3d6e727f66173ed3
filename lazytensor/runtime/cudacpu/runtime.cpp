// The CUDACPU runtime: runs a CUDA kernel compiled for the host (by g++, against prelude.h) with GPU semantics.
//
// Built once per machine into a shared library that ops_cudacpu.py loads with RTLD_GLOBAL, so that every kernel's
// shared object finds threadIdx, blockIdx, blockDim, gridDim, lt_syncthreads and lt_warp_exchange here.
//
// Blocks are spread over worker OS threads (the caller plus a pool), each claiming the next block from a counter.
// Within a block, every CUDA thread is a fiber: its own stack and registers, switched by hand-written code on x86-64
// (ucontext elsewhere). Fibers rather than OS threads because a block of 256 threads with std::thread + std::barrier
// pays a futex wake and a kernel context switch (a few microseconds) per thread per barrier on 2 cores, while a fiber
// switch is a dozen instructions (~5 ns). All fibers of a block run on one OS thread, so `__shared__` (static
// thread_local in prelude.h) is really shared by the block and private to it, and the fibers never migrate, so a
// thread_local address a kernel keeps across a barrier stays right.
//
// A fiber runs until it finishes or waits at a barrier; then the scheduler starts or resumes the next one.
//   * __syncthreads(): every thread of the block that has not exited arrives before any leaves (threads that exited
//     count as arrived, as on Volta and later).
//   * lt_warp_exchange (mma.sync): the 32 lanes of a warp (consecutive linear thread ids) each put their fragment
//     words in the warp's buffer, wait until all 32 have, and read back everyone's words. Two buffers per warp used
//     in turn: a lane can only be one exchange ahead of the slowest lane, so it never overwrites words still read.
// A block whose waiting threads can never all arrive (a barrier inside divergent code, a warp short of lanes) is an
// error with a message, never a hang.
#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <sys/mman.h>
#include <thread>
#include <unistd.h>
#include <utility>
#include <vector>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

struct uint3 { unsigned x, y, z; };
struct dim3 { unsigned x, y, z; };

extern "C" {
__thread uint3 threadIdx, blockIdx;
__thread dim3 blockDim, gridDim;
}

namespace {

constexpr int kMaxThreads = 1024, kWarp = 32, kMaxWarps = kMaxThreads / kWarp, kMaxArgs = 64;
constexpr int kXchgWords = 64;  // words one lane may put into one warp exchange
constexpr size_t kStackBytes = 256 * 1024;  // register arrays of large tiles live here; pages are touched lazily

// ---- context switching ----

#if defined(__x86_64__)
// lt_switch(from, to): pushes the callee-saved registers onto the current stack, stores the stack pointer in *from, and
// pops the same from the stack `to` (SysV ABI: everything else is caller-saved). MXCSR and the x87 control word are
// not switched: kernels never change rounding modes, and ldmxcsr is microcoded (slow) on AMD cores.
extern "C" void lt_switch(void** from, void* to);
asm(R"(
  .text
  .p2align 4
  .type lt_switch,@function
lt_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size lt_switch, .-lt_switch
  .p2align 4
  .type lt_fiber_start,@function
lt_fiber_start:
  movq %r12, %rdi
  call lt_fiber_main
  ud2
  .size lt_fiber_start, .-lt_fiber_start
)");
extern "C" void lt_fiber_start();
#endif

struct Fiber;
extern "C" [[noreturn]] void lt_fiber_main(Fiber* f);

enum class State { kRunning, kWaitBlock, kWaitWarp, kDone };

struct Fiber {
  char* stack = nullptr;  // the lowest usable byte (mmap'd, with a guard page below it)
#if defined(__x86_64__)
  void* sp = nullptr;
#else
  ucontext_t ctx;
#endif
  unsigned tid = 0;
  State state = State::kRunning;
  uint64_t wait_gen = 0;
  uint32_t xchg_count = 0;  // exchanges this thread has done: picks which of the warp's two buffers is next
};

using KernelFn = void (*)();

struct Launch {
  KernelFn fn;
  int nargs;
  void* const* args;
  uint3 grid;
  dim3 block;
  unsigned nthreads;
  uint64_t nblocks;
  std::atomic<uint64_t> next_block{0};
  std::atomic<bool> failed{false};
  std::mutex err_mutex;
  std::string error;

  void fail(const std::string& msg) {
    std::lock_guard<std::mutex> g(err_mutex);
    if (!failed.exchange(true)) error = msg;
  }
};

// ---- calling a kernel with n pointer arguments ----

template <size_t... I>
void call_with(KernelFn fn, void* const* a, std::index_sequence<I...>) {
  reinterpret_cast<void (*)(decltype((void)I, static_cast<void*>(nullptr))...)>(fn)(a[I]...);
}

template <size_t... N>
constexpr auto make_callers(std::index_sequence<N...>) {
  using Caller = void (*)(KernelFn, void* const*);
  return std::array<Caller, sizeof...(N)>{
    +[](KernelFn fn, void* const* a) { call_with(fn, a, std::make_index_sequence<N>{}); }...};
}

// ---- one worker: the fibers and block state of one OS thread ----

struct Worker {
  Launch* launch = nullptr;
  std::vector<Fiber*> fibers;  // every fiber this OS thread has made; reused by later blocks and launches
  std::vector<Fiber*> waiting;
#if defined(__x86_64__)
  void* sched_sp = nullptr;
#else
  ucontext_t sched_ctx;
#endif
  Fiber* cur = nullptr;
  // the block being run
  unsigned alive = 0, arrived = 0, next_tid = 0;
  uint64_t gen = 0;
  unsigned warp_arrived[kMaxWarps], warp_done[kMaxWarps];
  uint64_t warp_gen[kMaxWarps];
  uint32_t xchg[kMaxWarps][2][kWarp * kXchgWords];
  std::string error;  // set by a fiber that found the block broken; the scheduler abandons the block

  Fiber* new_fiber();
  void restart(Fiber* f);
  void set_thread(unsigned tid);
  void resume(Fiber* f);
  void yield(State s);
  bool ready(const Fiber* f) const;
  void exited(const Fiber* f);
  bool run_block(uint64_t b);
  std::string stuck() const;
};

thread_local Worker* tl_worker = nullptr;

Worker& worker() {
  if (tl_worker == nullptr) tl_worker = new Worker();  // lives as long as its thread; fibers are never freed
  return *tl_worker;
}

Fiber* Worker::new_fiber() {
  long page = sysconf(_SC_PAGESIZE);
  void* mem = mmap(nullptr, kStackBytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
  if (mem == MAP_FAILED) return nullptr;
  mprotect(mem, page, PROT_NONE);  // a stack overflow faults here instead of writing over another fiber's stack
  Fiber* f = new Fiber();
  f->stack = static_cast<char*>(mem) + page;
  restart(f);
  fibers.push_back(f);
  return f;
}

// Makes f start afresh in lt_fiber_main when next resumed: for a new fiber, and for one left inside a kernel by a
// block that broke.
void Worker::restart(Fiber* f) {
  f->state = State::kDone;
#if defined(__x86_64__)
  // the frame lt_switch pops: r15, r14, r13, r12 (= the fiber), rbx, rbp, then it "returns" into lt_fiber_start with
  // the stack 16-byte aligned, as a call expects
  uint64_t* sp = reinterpret_cast<uint64_t*>(f->stack + kStackBytes - 72);
  sp[0] = sp[1] = sp[2] = 0;
  sp[3] = reinterpret_cast<uint64_t>(f);
  sp[4] = sp[5] = 0;
  sp[6] = reinterpret_cast<uint64_t>(&lt_fiber_start);
  f->sp = sp;
#else
  getcontext(&f->ctx);
  f->ctx.uc_stack.ss_sp = f->stack;
  f->ctx.uc_stack.ss_size = kStackBytes;
  f->ctx.uc_link = nullptr;
  // makecontext passes ints: the fiber pointer goes through the worker instead
  makecontext(&f->ctx, reinterpret_cast<void (*)()>(+[]() { lt_fiber_main(worker().cur); }), 0);
#endif
}

void Worker::set_thread(unsigned tid) {
  const dim3& bd = launch->block;
  threadIdx = uint3{tid % bd.x, tid / bd.x % bd.y, tid / (bd.x * bd.y)};
}

void Worker::resume(Fiber* f) {
  set_thread(f->tid);
  f->state = State::kRunning;
  cur = f;
#if defined(__x86_64__)
  lt_switch(&sched_sp, f->sp);
#else
  swapcontext(&sched_ctx, &f->ctx);
#endif
}

void Worker::yield(State s) {
  Fiber* f = cur;
  f->state = s;
#if defined(__x86_64__)
  lt_switch(&f->sp, sched_sp);
#else
  swapcontext(&f->ctx, &sched_ctx);
#endif
}

bool Worker::ready(const Fiber* f) const {
  if (f->state == State::kWaitBlock) return gen != f->wait_gen;
  return warp_gen[f->tid / kWarp] != f->wait_gen;
}

// a thread returned from the kernel
void Worker::exited(const Fiber* f) {
  unsigned w = f->tid / kWarp;
  warp_done[w]++;
  if (warp_arrived[w] != 0 && error.empty()) {
    error = "thread " + std::to_string(f->tid) + " exited while " + std::to_string(warp_arrived[w]) +
            " lanes of its warp wait in an mma.sync";
  }
  // exited threads count as arrived at __syncthreads
  if (--alive != 0 && arrived == alive) { arrived = 0; gen++; }
}

std::string Worker::stuck() const {
  unsigned at_block = 0, at_warp = 0;
  for (const Fiber* f : waiting) (f->state == State::kWaitBlock ? at_block : at_warp)++;
  return "deadlock: " + std::to_string(at_block) + " threads wait at __syncthreads() and " + std::to_string(at_warp) +
         " in an mma.sync warp exchange that can never complete (a barrier in divergent code?)";
}

// Runs block b to its end; false (with `error` set) when the block broke.
bool Worker::run_block(uint64_t b) {
  const Launch& L = *launch;
  blockIdx = uint3{unsigned(b % L.grid.x), unsigned(b / L.grid.x % L.grid.y),
                   unsigned(b / (uint64_t(L.grid.x) * L.grid.y))};
  alive = L.nthreads;
  arrived = 0;
  next_tid = 0;
  unsigned nwarps = (L.nthreads + kWarp - 1) / kWarp;
  std::memset(warp_arrived, 0, sizeof(unsigned) * nwarps);
  std::memset(warp_done, 0, sizeof(unsigned) * nwarps);
  error.clear();
  waiting.clear();
  // start the threads in order: a fiber runs thread after thread (lt_fiber_main) until one waits at a barrier, and the
  // next fiber takes over from there, so a block that never waits runs on one fiber with no switch between threads.
  // fibers[:used] are waiting, the rest are free.
  size_t used = 0;
  while (next_tid < L.nthreads) {
    Fiber* f = used < fibers.size() ? fibers[used] : new_fiber();
    if (f == nullptr) { error = "out of memory for the stacks of a block's threads"; return false; }
    resume(f);
    if (!error.empty()) return false;
    if (f->state != State::kDone) {
      waiting.push_back(f);
      used++;
    }
  }
  // then resume waiting threads whose barrier has released, until all are done
  while (!waiting.empty()) {
    size_t kept = 0;
    bool progressed = false;
    for (Fiber* f : waiting) {
      if (ready(f)) {
        resume(f);
        progressed = true;
        if (!error.empty()) return false;
        if (f->state == State::kDone) continue;
      }
      waiting[kept++] = f;
    }
    waiting.resize(kept);
    if (!progressed && !waiting.empty()) { error = stuck(); return false; }
  }
  return true;
}

// ---- the pool of OS threads that run blocks ----

void run_blocks(Launch& L) {
  Worker& w = worker();
  w.launch = &L;
  gridDim = dim3{L.grid.x, L.grid.y, L.grid.z};
  blockDim = L.block;
  for (uint64_t b; !L.failed.load(std::memory_order_relaxed) && (b = L.next_block.fetch_add(1)) < L.nblocks;) {
    if (!w.run_block(b)) {
      for (Fiber* f : w.fibers) if (f->state != State::kDone) w.restart(f);
      char where[96];
      std::snprintf(where, sizeof(where), "block (%u, %u, %u): ", blockIdx.x, blockIdx.y, blockIdx.z);
      L.fail(where + w.error);
    }
  }
  w.launch = nullptr;
}

struct Pool {
  std::mutex m;
  std::condition_variable wake, finished;
  std::vector<std::thread> threads;
  Launch* job = nullptr;
  uint64_t job_id = 0;
  unsigned want = 0, running = 0;  // helpers asked to join this job, and those still in it

  void helper(unsigned index) {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lk(m);
    for (;;) {
      wake.wait(lk, [&] { return job_id != seen; });
      seen = job_id;
      if (index >= want) continue;
      Launch* L = job;
      lk.unlock();
      run_blocks(*L);
      lk.lock();
      if (--running == 0) finished.notify_all();
    }
  }

  // runs L on the calling thread plus `helpers` pool threads, and returns when every block is done
  void run(Launch& L, unsigned helpers) {
    {
      std::lock_guard<std::mutex> g(m);
      while (threads.size() < helpers) {
        threads.emplace_back(&Pool::helper, this, unsigned(threads.size()));
        threads.back().detach();
      }
      job = &L;
      want = running = helpers;
      job_id++;
    }
    if (helpers) wake.notify_all();
    run_blocks(L);
    std::unique_lock<std::mutex> lk(m);
    finished.wait(lk, [&] { return running == 0; });
    job = nullptr;
  }
};

Pool& pool = *new Pool();  // never destroyed: its threads wait on it until the process ends
std::mutex launch_mutex;  // one launch at a time: the pool and the per-thread workers serve one job

int report(char* err, size_t errlen, const std::string& msg) {
  std::snprintf(err, errlen, "%s", msg.c_str());
  return 1;
}

}  // namespace

extern "C" [[noreturn]] void lt_fiber_main(Fiber* f) {
  Worker& w = worker();
  static constexpr auto callers = make_callers(std::make_index_sequence<kMaxArgs + 1>{});
  for (;;) {
    // run the block's next thread, and the next, until one waits (the scheduler resumes this fiber when its barrier
    // releases) or none is left to start; then the scheduler hands this fiber to the next block or launch
    while (w.next_tid < w.launch->nthreads && w.error.empty()) {
      f->tid = w.next_tid++;
      f->xchg_count = 0;
      w.set_thread(f->tid);
      callers[w.launch->nargs](w.launch->fn, w.launch->args);
      w.exited(f);
    }
    w.yield(State::kDone);
  }
}

extern "C" {

void lt_syncthreads(void) {
  Worker& w = *tl_worker;
  if (++w.arrived == w.alive) { w.arrived = 0; w.gen++; return; }
  w.cur->wait_gen = w.gen;
  w.yield(State::kWaitBlock);
}

// Every lane of a warp calls this with its `n` words; returns the warp's 32 x n words (lane-major), valid until this
// lane's next exchange. Lanes are linear thread ids, 32 consecutive ones a warp, as on the GPU.
const uint32_t* lt_warp_exchange(const uint32_t* words, int n) {
  Worker& w = *tl_worker;
  Fiber* f = w.cur;
  unsigned warp = f->tid / kWarp, lane = f->tid % kWarp;
  if (n <= 0 || n > kXchgWords) {
    w.error = "a warp exchange of " + std::to_string(n) + " words; at most " + std::to_string(kXchgWords);
    w.yield(State::kWaitWarp);
  }
  if (w.launch->nthreads < (warp + 1) * kWarp || w.warp_done[warp] != 0) {
    w.error = "mma.sync needs all 32 lanes of warp " + std::to_string(warp) + "; the block has " +
              std::to_string(w.launch->nthreads) + " threads" + (w.warp_done[warp] ? " and some have exited" : "");
    w.yield(State::kWaitWarp);  // never resumed: the scheduler abandons the block
  }
  uint32_t* buf = w.xchg[warp][f->xchg_count++ & 1];
  std::memcpy(buf + lane * n, words, sizeof(uint32_t) * n);
  if (++w.warp_arrived[warp] == kWarp) {
    w.warp_arrived[warp] = 0;
    w.warp_gen[warp]++;
  } else {
    f->wait_gen = w.warp_gen[warp];
    w.yield(State::kWaitWarp);
  }
  return buf;
}

// Runs `fn` (a kernel taking `nargs` pointers) over a grid of blocks on `workers` OS threads. Returns 0, or 1 with a
// message in `err`.
int lt_launch(void* fn, int nargs, void* const* args, const unsigned* grid, const unsigned* block, int workers,
              char* err, size_t errlen) {
  if (nargs < 0 || nargs > kMaxArgs)
    return report(err, errlen, "a kernel with " + std::to_string(nargs) + " arguments; at most " +
                  std::to_string(kMaxArgs));
  uint64_t nthreads = uint64_t(block[0]) * block[1] * block[2];
  if (nthreads == 0 || nthreads > kMaxThreads)
    return report(err, errlen, "a block of " + std::to_string(nthreads) + " threads; a block has 1 to " +
                  std::to_string(kMaxThreads));
  uint64_t nblocks = uint64_t(grid[0]) * grid[1] * grid[2];
  if (nblocks == 0) return 0;
  std::lock_guard<std::mutex> g(launch_mutex);
  Launch L;
  L.fn = reinterpret_cast<KernelFn>(fn);
  L.nargs = nargs;
  L.args = args;
  L.grid = uint3{grid[0], grid[1], grid[2]};
  L.block = dim3{block[0], block[1], block[2]};
  L.nthreads = unsigned(nthreads);
  L.nblocks = nblocks;
  unsigned helpers = unsigned(std::min<uint64_t>(workers > 1 ? workers - 1 : 0, nblocks - 1));
  if (helpers) pool.run(L, helpers);
  else run_blocks(L);
  if (L.failed) return report(err, errlen, L.error);
  return 0;
}

}  // extern "C"
