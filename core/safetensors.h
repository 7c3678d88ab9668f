// safetensors.h — reading and writing tensors in the safetensors format.
//
// safetensors is the format Hugging Face publishes model weights in (GPT-2's
// model.safetensors, for example), so the engine can start from published weights and
// hand its own checkpoints back to the Python world. A file is three parts:
//
//   bytes [0, 8)        N, the header length: an unsigned 64-bit little-endian integer
//   bytes [8, 8+N)      the header: UTF-8 JSON, one object:
//                         { "__metadata__": {"format": "pt", ...},          (optional)
//                           "wte.weight": {"dtype": "F32",
//                                          "shape": [50257, 768],
//                                          "data_offsets": [0, 154389504]},
//                           ... }
//   bytes [8+N, EOF)    the data buffer: each tensor's elements, row-major, little-endian
//
// data_offsets [begin, end) are relative to the start of the data buffer (byte 8+N of the
// file), not to the start of the file. "__metadata__", when present, maps strings to
// strings. Writers pad the header with trailing spaces so that the data buffer starts on
// an 8-byte boundary, which lets a reader that maps the file use the tensors in place.
//
// Reading validates the whole header up front (see tb_safetensors_open) so that a
// corrupt or truncated file is refused with a message that names the file, the tensor
// and the wrong value, instead of loading garbage weights. Tensors are then read one at a
// time with pread, never by reading the whole file into memory: GPT-2 124M is ~500 MB in
// F32 and the larger ones are several GB.
//
// Writing produces F32 only (the engine trains in F32) and is crash-safe: the file is
// written beside its destination under a temporary name, flushed to disk and renamed
// over the destination, so a crash or a full disk mid-write never leaves a half-written
// checkpoint where a good one was.
//
// The host is assumed little-endian (x86_64, aarch64 Linux): the data buffer and the
// header length are read and written as raw host words.
#ifndef TB_CORE_SAFETENSORS_H
#define TB_CORE_SAFETENSORS_H

#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "core/error.h"

#define TB_ST_MAX_DIMS 8

// Headers larger than this are refused as corrupt (the reference implementation uses the
// same limit); a real header is a few tens of KB even for models with thousands of tensors.
#define TB_ST_MAX_HEADER_LEN 100000000ull

typedef struct tb_st_tensor {
    char *name;
    char dtype[8];          // "F32", "F16", "BF16", ... (the longest, "F8_E4M3", fits)
    int ndim;               // 0 for a scalar (shape []), which holds one element
    int64_t shape[TB_ST_MAX_DIMS];
    uint64_t begin, end;    // byte offsets in the data buffer, [begin, end)
} tb_st_tensor;

typedef struct tb_safetensors {
    char *path;
    FILE *fp;
    uint64_t header_len;    // N
    uint64_t data_start;    // 8 + N: file offset of the data buffer
    uint64_t file_size;     // bytes in the file when it was opened
    int ntensors;
    tb_st_tensor *tensors;  // sorted by data offset (begin, then end, then name), i.e. in
                            // the order their bytes lie in the file, so a caller that
                            // reads them all walks the file front to back
    json_t *metadata;       // the "__metadata__" object (owned; strings only) or NULL
} tb_safetensors;

// Opens `path` and validates its header: the file exists and is a regular file (a FIFO or
// a device is refused before it is opened) of at least 8 bytes; N is at most TB_ST_MAX_HEADER_LEN and 8+N fits in the file; the header
// is one JSON object without duplicate keys; "__metadata__", if present, is an object of
// strings; every other entry is an object with a known dtype, a shape of at most
// TB_ST_MAX_DIMS non-negative integers, and data_offsets [begin, end] with begin <= end,
// the end inside the file, and end-begin == numel * dtype size; no two tensors share a
// byte; the furthest-reaching tensor ends the file (trailing bytes are refused, as the
// reference implementation refuses them). Gaps between tensors are allowed.
//
// On failure, returns -1 with a message naming the path, the tensor, the wrong value and
// the file byte offset where one applies, and leaves *st closed (all zero). On success
// the caller must tb_safetensors_close(st).
int tb_safetensors_open(tb_safetensors *st, const char *path, tb_error *err);

// Releases everything; safe on a zeroed, failed or already-closed struct.
void tb_safetensors_close(tb_safetensors *st);

// The tensor named `name`, or NULL.
const tb_st_tensor *tb_safetensors_find(const tb_safetensors *st, const char *name);

// Elements in the tensor: the product of its shape (1 for a scalar, 0 if any dim is 0).
int64_t tb_st_tensor_numel(const tb_st_tensor *t);

// Bytes per element of a safetensors dtype name ("F32" -> 4), or 0 if it is unknown.
int tb_st_dtype_size(const char *dtype);

// Reads tensor `t` (one of st's) into dst, which holds tb_st_tensor_numel(t) floats,
// converting F32, F16 and BF16 to float exactly (F16 subnormals, infinities and NaNs
// included). Other dtypes fail with "dtype X of tensor Y is not supported yet".
// Uses pread, so it does not move any file position and different threads may read
// different tensors of one open file at the same time.
int tb_safetensors_read_f32(const tb_safetensors *st, const tb_st_tensor *t, float *dst,
                            tb_error *err);

typedef struct tb_st_entry {
    const char *name;
    int ndim;
    int64_t shape[TB_ST_MAX_DIMS];
    const float *data;      // numel floats, written as F32 (may be NULL when numel is 0)
} tb_st_entry;

// Writes the n entries as an F32 safetensors file at `path`, in the given order, with
// the data buffer 8-byte aligned. metadata: NULL, or a JSON object whose values are all
// strings, written as "__metadata__" (the caller keeps its reference).
//
// Crash-safe: everything is checked first (names non-empty, valid UTF-8, unique and not
// "__metadata__"; 0 <= ndim <= TB_ST_MAX_DIMS; dims >= 0; data non-NULL when numel > 0;
// metadata values strings), then the file is written to "<path>.tmp.<pid>", flushed and
// fsync'ed, renamed over `path`, and the directory fsync'ed so the rename is durable.
// On any failure before the rename the temporary file is removed and an existing file
// at `path` is left exactly as it was.
int tb_safetensors_write(const char *path, const tb_st_entry *entries, int n,
                         json_t *metadata, tb_error *err);
// The same, with the seconds each part took (when seconds is not NULL): [0] building the
// header, [1] writing the bytes (to the kernel), [2] fsync, close, rename and the directory's fsync.
int tb_safetensors_write_timed(const char *path, const tb_st_entry *entries, int n, json_t *metadata,
                               double seconds[3], tb_error *err);

// Where the writer finds the entries' bytes when they are not host memory in place (a
// device's tensors, tensors gathered over tensor parallelism): fetch returns entry i's
// numel floats in host memory, valid until its next call. It is called once per entry, in
// entry order, as the file is written; the entries' data are not read (they may be NULL).
// A failure stops the calls early: a caller whose fetch is a collective makes the calls
// that are left itself.
typedef struct tb_st_source {
    const float *(*fetch)(void *ctx, int i, const tb_st_entry *e);
    void *ctx;
} tb_st_source;
// tb_safetensors_write_timed with the bytes from source (NULL: the entries' data).
int tb_safetensors_write_from(const char *path, const tb_st_entry *entries, int n, json_t *metadata,
                              const tb_st_source *source, double seconds[3], tb_error *err);

#endif
