/* What every libFuzzer harness of tests/fuzz shares (see README.md): a
 * private scratch folder for readers that take a path, input splitting, and
 * the limits a harness runs under. */
#ifndef SPRY_FUZZ_COMMON_H
#define SPRY_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* Sets the limits (SPRY_MAX_MEMORY_MB=1024: a size a file chose must be
 * refused below libFuzzer's 2 GB malloc limit, not allocated) and makes
 * the scratch folder. Called by LLVMFuzzerInitialize and the replay main. */
void fz_init(void);
/* This process's scratch folder (on /dev/shm when there is one: every input
 * becomes a file). Removed at exit. */
const char *fz_dir(void);
/* Writes data to fz_dir()/name; returns the path (valid until the next
 * call). A write failure traps: the harness cannot test anything then. */
const char *fz_write(const char *name, const void *data, size_t size);
/* Removes every file of fz_dir() (not sub-folders' contents: see fz_clear_dir). */
void fz_clear(void);
/* Removes a folder under fz_dir() and everything in it. */
void fz_clear_dir(const char *path);
/* A NUL-terminated copy (free it). */
char *fz_text(const uint8_t *data, size_t size);
/* Splits data at each occurrence of the 4-byte marker "@@@@" into at most
 * max pieces (the last one keeps any further markers); returns the count. */
int fz_split(const uint8_t *data, size_t size, const uint8_t **piece, size_t *len, int max);
/* Where harnesses add the bytes a reader handed back, so that every byte is
 * read (ASan sees any stray one) and the reads are not optimised away. */
extern volatile unsigned fz_sink;
/* Stops the harness when a reader broke its own contract. */
#define FZ_ASSERT(c)           \
  do {                         \
    if (!(c)) __builtin_trap(); \
  } while (0)

#endif
