/* Ctrl-C and SIGTERM during training: the run stops after its step, saves
 * last.safetensors and exits 130 (loop.c). The signals are taken by a
 * watcher thread in sigtimedwait while every computing thread blocks them.
 *
 * Why not a handler that interrupts whichever thread computes: oneDNN 2.6's
 * f32 "no copy" gemm kernels (what dnnl_sgemm and gemm-based primitives run
 * for few rows, such as a linear layer's gradients at batch 4) point rsp
 * into a heap workspace while they run. A signal delivered to a thread
 * inside one makes the kernel write the signal frame there, over malloc's
 * chunk headers: the process aborts later ("corrupted size vs. prev_size")
 * or, worse, trains on (oneDNN issue 4845, fixed in 3.11). Measured with
 * a flag-only handler: `spry train` of vgg-face at batch 4, SIGTERM sent
 * mid-epoch on a machine under load, aborted in 6 of 160 and 7 of 250 runs,
 * each time with the signal landing in the same JIT code; a loop of such
 * sgemm calls hit by SIGTERM every 20 us aborted within 1.5 s in 6 of 6
 * (tests/train/test_stop_signals.c keeps that loop). With the watcher: 0 of
 * 600 runs.
 *
 * Threads alive before the run (OpenBLAS's pool, MPI's progress threads)
 * may still take a signal through the flag handler; they run no oneDNN
 * code. Threads the run starts later (the batch ring's workers, new OpenMP
 * threads, FFmpeg's decoders) inherit the block from their creator. */
#include <omp.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "spry/common.h"
#include "train/stop_signals.h"

/* Set by the handler and the watcher, read by the run's thread: atomics
 * (lock-free, so the handler may store one). presses: the SIGINTs taken
 * since the run began. */
static int requested, quitting, presses;
static sigset_t stop_set, old_mask;
static struct sigaction old_int, old_term;
static pthread_t watcher;
static int running;

static void say(const char *msg) {
  if (write(2, msg, strlen(msg)) < 0) return; /* nothing to do about a closed stderr */
}

/* One SIGINT or SIGTERM: the first asks the run to stop after its step
 * (and says so: the step and the save may take a while). A second Ctrl-C
 * quits at once, for a user who will not wait: the last checkpoint stays,
 * and one half written is a temporary the next start removes. SIGTERM
 * never does (mpirun, timeout and service managers send it and follow with
 * SIGKILL when they will not wait). Async-signal-safe: the handler calls it
 * too. */
static void take_stop_signal(int sig) {
  if (sig == SIGINT && __atomic_add_fetch(&presses, 1, __ATOMIC_ACQ_REL) >= 2) {
    /* Static text (a signal handler): it cannot know whether a checkpoint
     * exists yet, so it does not claim one. */
    say("\nspry: quitting at once without saving; --resume continues from the last checkpoint the run saved, if it "
        "saved one\n");
    _exit(130);
  }
  if (!__atomic_exchange_n(&requested, 1, __ATOMIC_ACQ_REL))
    say("\nspry: stopping after this step and saving it (Ctrl-C again to quit at once)\n");
}

/* For a thread that does not block the signals (one started before the
 * run). */
static void on_signal(int sig) { take_stop_signal(sig); }

/* Waits in slices of 100 ms, so that it ends with the run even if the
 * signal sp_stop_signals_end sends it were taken elsewhere. */
static void *watch(void *arg) {
  (void)arg;
  const struct timespec slice = {0, 100 * 1000 * 1000};
  while (!__atomic_load_n(&quitting, __ATOMIC_ACQUIRE)) {
    const int sig = sigtimedwait(&stop_set, NULL, &slice);
    /* < 0: the slice ended (EAGAIN) or EINTR */
    if (sig > 0 && !__atomic_load_n(&quitting, __ATOMIC_ACQUIRE)) take_stop_signal(sig);
  }
  return NULL;
}

int sp_stop_signals_begin(int threads) {
  sigemptyset(&stop_set);
  sigaddset(&stop_set, SIGINT);
  sigaddset(&stop_set, SIGTERM);
  __atomic_store_n(&requested, 0, __ATOMIC_RELEASE);
  __atomic_store_n(&quitting, 0, __ATOMIC_RELEASE);
  __atomic_store_n(&presses, 0, __ATOMIC_RELEASE);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART; /* system calls a signal interrupts carry on: the flag is read between steps */
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  pthread_sigmask(SIG_BLOCK, &stop_set, &old_mask);
  /* The OpenMP pool's threads were started unblocked (by this thread,
   * earlier): one team as large as any the run will use blocks them. */
  const int n = threads > omp_get_max_threads() ? threads : omp_get_max_threads();
#pragma omp parallel num_threads(n)
  pthread_sigmask(SIG_BLOCK, &stop_set, NULL);
  int rc = pthread_create(&watcher, NULL, watch, NULL); /* started blocked, as it must be for sigtimedwait */
  if (rc != 0) {
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
    return sp_error_set("cannot start the thread that takes Ctrl-C: %s", strerror(rc));
  }
  running = 1;
  return 0;
}

int sp_stop_signals_requested(void) { return __atomic_load_n(&requested, __ATOMIC_ACQUIRE) != 0; }

void sp_stop_signals_end(void) {
  if (!running) return;
  __atomic_store_n(&quitting, 1, __ATOMIC_RELEASE);
  pthread_kill(watcher, SIGTERM); /* directed at the watcher: its sigtimedwait returns */
  pthread_join(watcher, NULL);
  running = 0;
  /* Handlers first: a signal still pending when the mask opens then acts as
   * it would have without the run (by default, it ends the process). */
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGTERM, &old_term, NULL);
  pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
}
