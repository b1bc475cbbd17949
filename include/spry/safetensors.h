/* spry checkpoints: the safetensors format (https://github.com/huggingface/safetensors).
 *
 * Layout: u64 little-endian header length N, N bytes of JSON header
 *   {"__metadata__":{"k":"v",...}, "name":{"dtype":"F32","shape":[..],"data_offsets":[b,e]}, ...}
 * then the data buffer; offsets are relative to the buffer start.
 *
 * Reading validates the whole header before returning, so a file that opens
 * is safe to use: every tensor lies inside the file, sizes match shapes, and
 * no two tensors share bytes. Only the dtypes spry computes with are accepted
 * (F32, BF16, U8, I32); others are refused with "unsupported dtype".
 *
 * Writing is atomic: the file is built as "<path>.tmp.<pid>", synced, then
 * renamed over <path>, so a crash leaves either the old or the new checkpoint,
 * never half of one. The output is readable by Python's safetensors package
 * (header padded with spaces to 8 bytes, tensors packed back to back in
 * insertion order). */
#ifndef SPRY_SAFETENSORS_H
#define SPRY_SAFETENSORS_H

#include <stddef.h>

#include "spry/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Upper bound on the JSON header; larger headers are refused before any
 * allocation (same limit as the reference implementation). */
#define SP_ST_MAX_HEADER ((size_t)100 * 1000 * 1000)

/* ---- reader ---- */
typedef struct sp_st_file sp_st_file;

/* Maps (or, where mapping fails, reads) and validates the file. NULL on any
 * problem, with sp_last_error() naming the file and the reason. */
sp_st_file *sp_st_open(const char *path);
/* Same from memory (copied; `label` names it in messages). Used by the fuzzer. */
sp_st_file *sp_st_open_buffer(const void *data, size_t size, const char *label);
void sp_st_close(sp_st_file *f);

/* Tensors in header order. */
int sp_st_count(const sp_st_file *f);
const char *sp_st_name(const sp_st_file *f, int i);
/* The tensor called `name`, or NULL (no error set) when absent. Its data
 * points into the loaded file, aligned to its element size (unaligned tensors
 * are copied once at open), and stays valid until sp_st_close. The mapping is
 * private: writes through data never reach the file, but treat it as
 * read-only. */
const sp_tensor *sp_st_get(const sp_st_file *f, const char *name);
/* Copies `name` into dst->data after checking dst's dtype and shape match
 * exactly; -1 with an error naming both shapes otherwise. */
int sp_st_read_into(const sp_st_file *f, const char *name, sp_tensor *dst);

/* __metadata__ entries (string values only), NULL when absent. */
const char *sp_st_meta(const sp_st_file *f, const char *key);
int sp_st_meta_count(const sp_st_file *f);
const char *sp_st_meta_key(const sp_st_file *f, int i);

/* ---- writer ---- */
typedef struct sp_st_writer sp_st_writer;

sp_st_writer *sp_st_writer_new(void);
/* Records a tensor under `name` (copied). The tensor's DATA IS NOT COPIED:
 * it is referenced and must stay valid and unchanged until
 * sp_st_writer_save returns. A repeated name, "__metadata__" or NULL data
 * with a non-zero size is an error (-1). */
int sp_st_writer_add(sp_st_writer *w, const char *name, const sp_tensor *t);
/* Sets a metadata string (both copied); setting a key again replaces it. */
int sp_st_writer_meta(sp_st_writer *w, const char *key, const char *value);
/* Writes the file atomically (see top). On failure no temporary file is left
 * and an existing file at path is untouched. May be called more than once. */
int sp_st_writer_save(sp_st_writer *w, const char *path);
void sp_st_writer_free(sp_st_writer *w);

/* One-call save. meta_json, when not NULL, is a JSON object of string values
 * (e.g. "{\"epoch\":\"3\"}") stored as __metadata__. */
int sp_st_save_tensors(const char *path, int n, const char *const names[], const sp_tensor tensors[],
                       const char *meta_json);

#ifdef __cplusplus
}
#endif
#endif
