/* Ctrl-C (SIGINT) and SIGTERM while a run trains: a request to stop after
 * the current step, taken by one watcher thread while every thread that
 * computes has both signals blocked (stop_signals.c says why). */
#ifndef SPRY_TRAIN_STOP_SIGNALS_H
#define SPRY_TRAIN_STOP_SIGNALS_H

/* From here until sp_stop_signals_end, SIGINT and SIGTERM set the request
 * instead of ending the process (the first says so on stderr); a second
 * SIGINT ends it at once with status 130. threads: the most OpenMP threads the run
 * will compute on (their pool is made to block the signals too). Returns 0,
 * or -1 with sp_last_error() when the watcher cannot start. Not nested. */
int sp_stop_signals_begin(int threads);

/* 1 once a SIGINT or SIGTERM has arrived since sp_stop_signals_begin. */
int sp_stop_signals_requested(void);

/* Stops the watcher and gives back the calling thread's signal mask and the
 * two signals' previous handlers. (The OpenMP pool's threads keep both
 * blocked: a process-directed signal then goes to a thread that is not in
 * the middle of a kernel.) */
void sp_stop_signals_end(void);

#endif
