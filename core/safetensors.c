#include "core/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fileio.h"
#include "core/xalloc.h"

// The header length and the data are raw host words; see the note in safetensors.h.
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c assumes a little-endian host"
#endif

// ---------------------------------------------------------------------------------------
// dtypes

typedef struct dtype_info {
    const char *name;
    int size;
} dtype_info;

// The dtypes of the reference implementation that have whole-byte elements. Knowing
// their sizes lets open() validate every entry of a file even when the engine can only
// convert some of them (read_f32 says which).
static const dtype_info dtypes[] = {
    {"F64", 8}, {"F32", 4}, {"F16", 2},     {"BF16", 2},    {"I64", 8},
    {"I32", 4}, {"I16", 2}, {"I8", 1},      {"U64", 8},     {"U32", 4},
    {"U16", 2}, {"U8", 1},  {"BOOL", 1},    {"F8_E4M3", 1}, {"F8_E5M2", 1},
};
#define NDTYPES ((int)(sizeof dtypes / sizeof dtypes[0]))

int tb_st_dtype_size(const char *dtype) {
    for (int i = 0; i < NDTYPES; i++)
        if (strcmp(dtypes[i].name, dtype) == 0) return dtypes[i].size;
    return 0;
}

int64_t tb_st_tensor_numel(const tb_st_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

// Writes "[d0, d1, ...]" into buf, for messages.
static const char *shape_str(char *buf, size_t size, const int64_t *shape, int ndim) {
    size_t used = 0;
    used += (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < ndim && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%" PRId64, i ? ", " : "",
                                 shape[i]);
    if (used < size) snprintf(buf + used, size - used, "]");
    return buf;
}

// numel * elem_size in bytes, or -1 if it does not fit in 63 bits (only a corrupt header
// asks for that). A zero dim makes the product 0 whatever the other dims are.
static int64_t shape_bytes(const int64_t *shape, int ndim, int elem_size) {
    for (int i = 0; i < ndim; i++)
        if (shape[i] == 0) return 0;
    int64_t n = elem_size;
    for (int i = 0; i < ndim; i++)
        if (__builtin_mul_overflow(n, shape[i], &n)) return -1;
    return n;
}

// ---------------------------------------------------------------------------------------
// Reading

// The IEEE binary16 bit pattern h as a float; exact for every pattern, since every half
// is representable as a float.
static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);            // inf, or NaN keeping its payload
    } else if (exp != 0) {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);  // normal: rebias the exponent
    } else {
        // zero or subnormal: man * 2^-24, exact in float (man < 2^10)
        float f = (float)man * 0x1p-24f;
        memcpy(&bits, &f, 4);
        bits |= sign;
    }
    float out;
    memcpy(&out, &bits, 4);
    return out;
}

// bfloat16 is the top half of a float.
static float bf16_to_f32(uint16_t b) {
    uint32_t bits = (uint32_t)b << 16;
    float out;
    memcpy(&out, &bits, 4);
    return out;
}

// Reads exactly len bytes at file offset off. pread may return short counts (signals,
// reads over 2 GB), so it loops; a 0 return means the file shrank since it was opened.
static int pread_all(const tb_safetensors *st, const char *tensor, void *buf, size_t len,
                     uint64_t off, tb_error *err) {
    int fd = fileno(st->fp);
    unsigned char *p = buf;
    size_t done = 0;
    while (done < len) {
        ssize_t r = pread(fd, p + done, len - done, (off_t)(off + done));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0)
            return tb_fail(err, "%s: tensor '%s': read of %zu bytes at byte offset %" PRIu64
                           " failed: %s", st->path, tensor, len - done, off + done,
                           strerror(errno));
        if (r == 0)
            return tb_fail(err, "%s: tensor '%s': file ends at byte offset %" PRIu64
                           " but the tensor's bytes run to %" PRIu64
                           " (was the file truncated after it was opened?)",
                           st->path, tensor, off + done, off + len);
        done += (size_t)r;
    }
    return 0;
}

int tb_safetensors_read_f32(const tb_safetensors *st, const tb_st_tensor *t, float *dst,
                            tb_error *err) {
    uint64_t off = st->data_start + t->begin;
    uint64_t nbytes = t->end - t->begin;
    size_t numel = (size_t)tb_st_tensor_numel(t);

    if (strcmp(t->dtype, "F32") == 0) return pread_all(st, t->name, dst, nbytes, off, err);

    int bf16 = strcmp(t->dtype, "BF16") == 0;
    if (!bf16 && strcmp(t->dtype, "F16") != 0)
        return tb_fail(err, "%s: dtype %s of tensor '%s' is not supported yet (F32, F16 and "
                       "BF16 are)", st->path, t->dtype, t->name);

    // Half-width elements go through a bounded staging buffer rather than one as large as
    // the tensor, so a 300 MB BF16 embedding costs 128 KB extra, not 150 MB.
    enum { CHUNK = 1 << 16 };
    uint16_t *buf = tb_xmalloc(CHUNK * sizeof *buf, "half-precision staging");
    for (size_t i = 0; i < numel; i += CHUNK) {
        size_t n = numel - i < CHUNK ? numel - i : CHUNK;
        if (pread_all(st, t->name, buf, n * 2, off + i * 2, err)) {
            free(buf);
            return -1;
        }
        for (size_t j = 0; j < n; j++) dst[i + j] = bf16 ? bf16_to_f32(buf[j]) : f16_to_f32(buf[j]);
    }
    free(buf);
    return 0;
}

const tb_st_tensor *tb_safetensors_find(const tb_safetensors *st, const char *name) {
    // A linear scan: a GPT-2 file has ~150 tensors and is searched once per tensor at load.
    for (int i = 0; i < st->ntensors; i++)
        if (strcmp(st->tensors[i].name, name) == 0) return &st->tensors[i];
    return NULL;
}

void tb_safetensors_close(tb_safetensors *st) {
    if (!st) return;
    for (int i = 0; i < st->ntensors; i++) free(st->tensors[i].name);
    free(st->tensors);
    if (st->metadata) json_decref(st->metadata);
    if (st->fp) fclose(st->fp);
    free(st->path);
    memset(st, 0, sizeof *st);
}

// A JSON value as compact text for a message, cut to fit buf: "the wrong value".
static const char *json_brief(const json_t *v, char *buf, size_t size) {
    char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!text) return snprintf(buf, size, "(unprintable)"), buf;
    if (strlen(text) < size) snprintf(buf, size, "%s", text);
    else snprintf(buf, size, "%.*s...", (int)size - 4, text);
    free(text);
    return buf;
}

// Fills t from one header entry; the caller has set t->name.
static int parse_entry(const tb_safetensors *st, tb_st_tensor *t, const json_t *v,
                       tb_error *err) {
    const char *path = st->path, *name = t->name;
    char jbuf[96];
    if (!json_is_object(v))
        return tb_fail(err, "%s: tensor '%s': header entry must be an object, got %s", path,
                       name, json_brief(v, jbuf, sizeof jbuf));

    const json_t *dtype = json_object_get(v, "dtype");
    if (!dtype) return tb_fail(err, "%s: tensor '%s': header entry has no \"dtype\"", path, name);
    if (!json_is_string(dtype))
        return tb_fail(err, "%s: tensor '%s': \"dtype\" must be a string, got %s", path,
                       name, json_brief(dtype, jbuf, sizeof jbuf));
    const char *ds = json_string_value(dtype);
    int esize = tb_st_dtype_size(ds);
    if (esize == 0) {
        char known[256] = "";
        for (int i = 0; i < NDTYPES; i++) {
            if (i) strcat(known, " ");
            strcat(known, dtypes[i].name);
        }
        return tb_fail(err, "%s: tensor '%s': unknown dtype %s (known: %s)", path, name,
                       json_brief(dtype, jbuf, sizeof jbuf), known);
    }
    snprintf(t->dtype, sizeof t->dtype, "%s", ds);

    const json_t *shape = json_object_get(v, "shape");
    if (!shape) return tb_fail(err, "%s: tensor '%s': header entry has no \"shape\"", path, name);
    if (!json_is_array(shape))
        return tb_fail(err, "%s: tensor '%s': \"shape\" must be an array, got %s", path,
                       name, json_brief(shape, jbuf, sizeof jbuf));
    if (json_array_size(shape) > TB_ST_MAX_DIMS)
        return tb_fail(err, "%s: tensor '%s': shape %s has %zu dims, more than the %d "
                       "supported", path, name, json_brief(shape, jbuf, sizeof jbuf),
                       json_array_size(shape), TB_ST_MAX_DIMS);
    t->ndim = (int)json_array_size(shape);
    for (int i = 0; i < t->ndim; i++) {
        const json_t *d = json_array_get(shape, (size_t)i);
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return tb_fail(err, "%s: tensor '%s': shape %s: dim %d must be a non-negative "
                           "integer", path, name, json_brief(shape, jbuf, sizeof jbuf), i);
        t->shape[i] = json_integer_value(d);
    }

    const json_t *offs = json_object_get(v, "data_offsets");
    if (!offs)
        return tb_fail(err, "%s: tensor '%s': header entry has no \"data_offsets\"", path, name);
    int offs_ok = json_is_array(offs) && json_array_size(offs) == 2;
    for (size_t i = 0; offs_ok && i < 2; i++) {
        const json_t *x = json_array_get(offs, i);
        offs_ok = json_is_integer(x) && json_integer_value(x) >= 0;
    }
    if (!offs_ok)
        return tb_fail(err, "%s: tensor '%s': \"data_offsets\" must be [begin, end], two "
                       "non-negative integers, got %s", path, name,
                       json_brief(offs, jbuf, sizeof jbuf));
    t->begin = (uint64_t)json_integer_value(json_array_get(offs, 0));
    t->end = (uint64_t)json_integer_value(json_array_get(offs, 1));
    if (t->begin > t->end)
        return tb_fail(err, "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                       "] begin after end", path, name, t->begin, t->end);
    uint64_t data_len = st->file_size - st->data_start;
    if (t->end > data_len)
        return tb_fail(err, "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                       "] end at file byte offset %" PRIu64 " but the file is %" PRIu64
                       " bytes (data buffer of %" PRIu64 " bytes starts at byte offset %" PRIu64
                       ")", path, name, t->begin, t->end, st->data_start + t->end,
                       st->file_size, data_len, st->data_start);

    char sbuf[256];
    int64_t need = shape_bytes(t->shape, t->ndim, esize);
    if (need < 0 || (uint64_t)need != t->end - t->begin) {
        shape_str(sbuf, sizeof sbuf, t->shape, t->ndim);
        if (need < 0)
            return tb_fail(err, "%s: tensor '%s': shape %s of %s overflows 64-bit byte count",
                           path, name, sbuf, t->dtype);
        return tb_fail(err, "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                       "] hold %" PRIu64 " bytes but shape %s of %s needs %" PRId64, path,
                       name, t->begin, t->end, t->end - t->begin, sbuf, t->dtype, need);
    }
    return 0;
}

static int cmp_by_offset(const void *a, const void *b) {
    const tb_st_tensor *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name);
}

// The metadata object must map strings to strings.
static int check_metadata(const json_t *md, const char *path, tb_error *err) {
    char jbuf[96];
    if (!json_is_object(md))
        return tb_fail(err, "%s: \"__metadata__\" must be an object of strings, got %s", path,
                       json_brief(md, jbuf, sizeof jbuf));
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)md, k, v) {
        if (!json_is_string(v))
            return tb_fail(err, "%s: \"__metadata__\" key '%s' has the value %s; metadata "
                           "values must be strings", path, k, json_brief(v, jbuf, sizeof jbuf));
    }
    return 0;
}

// Everything after the file is open and its size known: length prefix, header, entries.
static int open_validate(tb_safetensors *st, tb_error *err) {
    const char *path = st->path;
    if (st->file_size < 8)
        return tb_fail(err, "%s: file is %" PRIu64 " bytes, too short for the 8-byte header "
                       "length at byte offset 0", path, st->file_size);
    unsigned char lenbuf[8];
    if (fread(lenbuf, 1, 8, st->fp) != 8)
        return tb_fail(err, "%s: cannot read the header length at byte offset 0: %s", path,
                       ferror(st->fp) ? strerror(errno) : "unexpected end of file");
    uint64_t n;
    memcpy(&n, lenbuf, 8);  // little-endian host
    if (n > TB_ST_MAX_HEADER_LEN)
        return tb_fail(err, "%s: header length %" PRIu64 " (at byte offset 0) exceeds the "
                       "limit of %llu bytes; not a safetensors file, or a corrupt one",
                       path, n, TB_ST_MAX_HEADER_LEN);
    if (n > st->file_size - 8)
        return tb_fail(err, "%s: header length %" PRIu64 " (at byte offset 0) runs past the "
                       "end of the file: the file is %" PRIu64 " bytes, so at most %" PRIu64
                       " are left for the header", path, n, st->file_size, st->file_size - 8);
    st->header_len = n;
    st->data_start = 8 + n;

    char *text = tb_xmalloc(n, "safetensors header");
    if (fread(text, 1, n, st->fp) != n) {
        free(text);
        return tb_fail(err, "%s: cannot read the %" PRIu64 "-byte header at byte offset 8: %s",
                       path, n, ferror(st->fp) ? strerror(errno) : "unexpected end of file");
    }
    json_error_t jerr;
    json_t *root = json_loadb(text, n, JSON_REJECT_DUPLICATES, &jerr);
    free(text);
    // jansson's position counts the bytes consumed up to the end of the offending token,
    // so the token's last byte is one before it.
    if (!root)
        return tb_fail(err, "%s: header (bytes 8 to %" PRIu64 ") is not valid JSON: %s, at "
                       "file byte offset %" PRIu64 " (header line %d, column %d)", path,
                       st->data_start, jerr.text,
                       (uint64_t)8 + (uint64_t)(jerr.position ? jerr.position - 1 : 0),
                       jerr.line, jerr.column);
    if (!json_is_object(root)) {
        char jbuf[96];
        int rc = tb_fail(err, "%s: header (bytes 8 to %" PRIu64 ") must be a JSON object, "
                         "got %s", path, st->data_start, json_brief(root, jbuf, sizeof jbuf));
        json_decref(root);
        return rc;
    }

    json_t *md = json_object_get(root, "__metadata__");
    if (md) {
        if (check_metadata(md, path, err)) {
            json_decref(root);
            return -1;
        }
        st->metadata = json_incref(md);
    }

    size_t count = json_object_size(root) - (md ? 1 : 0);
    st->tensors = tb_xcalloc(count, sizeof *st->tensors, "safetensors tensor table");
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (strcmp(key, "__metadata__") == 0) continue;
        tb_st_tensor *t = &st->tensors[st->ntensors];
        t->name = tb_xstrdup(key, "tensor name");
        st->ntensors++;  // counted now so close() frees the name even if the entry is bad
        if (parse_entry(st, t, val, err)) {
            json_decref(root);
            return -1;
        }
    }
    json_decref(root);

    // Sorted by where the bytes lie, a tensor overlaps an earlier one exactly when it
    // begins before the furthest end seen so far. Empty tensors own no bytes, so they
    // overlap nothing wherever their offsets point.
    qsort(st->tensors, (size_t)st->ntensors, sizeof *st->tensors, cmp_by_offset);
    const tb_st_tensor *reach = NULL;  // the non-empty tensor with the furthest end so far
    for (int i = 0; i < st->ntensors; i++) {
        const tb_st_tensor *t = &st->tensors[i];
        if (t->begin == t->end) continue;
        if (reach && t->begin < reach->end)
            return tb_fail(err, "%s: tensors '%s' data_offsets [%" PRIu64 ", %" PRIu64 "] and "
                           "'%s' data_offsets [%" PRIu64 ", %" PRIu64 "] overlap at file "
                           "byte offset %" PRIu64, path, reach->name, reach->begin, reach->end,
                           t->name, t->begin, t->end, st->data_start + t->begin);
        if (!reach || t->end > reach->end) reach = t;
    }
    // Bytes after the last tensor are refused, as the reference implementation refuses
    // them: they are what is left of a header that lost entries, or another file appended.
    // (Gaps between tensors stay allowed.)
    uint64_t covered = reach ? reach->end : 0, data_len = st->file_size - st->data_start;
    if (covered < data_len) {
        char last[320] = "the header lists no tensor with data";
        if (reach)
            snprintf(last, sizeof last, "the last tensor, '%s', has data_offsets [%" PRIu64 ", %" PRIu64 "]",
                     reach->name, reach->begin, reach->end);
        return tb_fail(err, "%s: file bytes [%" PRIu64 ", %" PRIu64 ") (%" PRIu64 " trailing bytes) belong to "
                       "no tensor: %s", path, st->data_start + covered, st->file_size, data_len - covered, last);
    }
    return 0;
}

int tb_safetensors_open(tb_safetensors *st, const char *path, tb_error *err) {
    memset(st, 0, sizeof *st);
    st->path = tb_xstrdup(path, "safetensors path");
    // A FIFO or a device is refused before it is opened: either could block forever.
    struct stat sb;
    int fd = tb_open_regular(path, "a safetensors file is expected", &sb, err);
    if (fd >= 0 && !(st->fp = fdopen(fd, "rb"))) {
        tb_fail(err, "%s: cannot open safetensors file: %s", path, strerror(errno));
        close(fd);
    }
    if (!st->fp) {
        tb_safetensors_close(st);
        return -1;
    }
    st->file_size = (uint64_t)sb.st_size;
    if (open_validate(st, err)) {
        tb_safetensors_close(st);
        return -1;
    }
    return 0;
}

// ---------------------------------------------------------------------------------------
// Writing

// Checks the entries and builds the header JSON, with offsets laid out in entry order.
static json_t *build_header(const char *path, const tb_st_entry *entries, int n,
                            json_t *metadata, int fetched, tb_error *err) {
    if (n < 0) {
        tb_fail(err, "%s: cannot write %d tensors", path, n);
        return NULL;
    }
    if (metadata && check_metadata(metadata, path, err)) return NULL;
    json_t *root = json_object();
    if (!root) goto oom;
    // __metadata__ first, as the reference writer does, so a person reading the header
    // with `head -c` sees it.
    if (metadata && json_object_set(root, "__metadata__", metadata)) goto oom;

    uint64_t offset = 0;
    char sbuf[256];
    for (int i = 0; i < n; i++) {
        const tb_st_entry *e = &entries[i];
        const char *name = e->name ? e->name : "(null)";
        if (!e->name || !e->name[0]) {
            tb_fail(err, "%s: entry %d has an empty name", path, i);
            goto fail;
        }
        if (strcmp(e->name, "__metadata__") == 0) {
            tb_fail(err, "%s: entry %d: the name '__metadata__' is reserved for metadata",
                    path, i);
            goto fail;
        }
        if (e->ndim < 0 || e->ndim > TB_ST_MAX_DIMS) {
            tb_fail(err, "%s: tensor '%s': ndim %d out of range [0, %d]", path, name,
                    e->ndim, TB_ST_MAX_DIMS);
            goto fail;
        }
        for (int d = 0; d < e->ndim; d++)
            if (e->shape[d] < 0) {
                tb_fail(err, "%s: tensor '%s': shape %s has negative dim %d", path, name,
                        shape_str(sbuf, sizeof sbuf, e->shape, e->ndim), d);
                goto fail;
            }
        int64_t bytes = shape_bytes(e->shape, e->ndim, 4);
        if (bytes < 0) {
            tb_fail(err, "%s: tensor '%s': shape %s overflows a 64-bit byte count", path,
                    name, shape_str(sbuf, sizeof sbuf, e->shape, e->ndim));
            goto fail;
        }
        if (bytes > 0 && !e->data && !fetched) {
            tb_fail(err, "%s: tensor '%s': data is NULL but shape %s holds %" PRId64
                    " floats", path, name, shape_str(sbuf, sizeof sbuf, e->shape, e->ndim),
                    bytes / 4);
            goto fail;
        }
        if (json_object_get(root, e->name)) {
            tb_fail(err, "%s: tensor '%s': entry %d repeats the name of an earlier entry",
                    path, name, i);
            goto fail;
        }
        json_t *shape = json_array();
        json_t *offs = json_pack("[I, I]", (json_int_t)offset, (json_int_t)(offset + (uint64_t)bytes));
        json_t *ent = json_object();
        if (!shape || !offs || !ent) {
            json_decref(shape);
            json_decref(offs);
            json_decref(ent);
            goto oom;
        }
        for (int d = 0; d < e->ndim; d++) json_array_append_new(shape, json_integer(e->shape[d]));
        json_object_set_new(ent, "dtype", json_string("F32"));
        json_object_set_new(ent, "shape", shape);
        json_object_set_new(ent, "data_offsets", offs);
        // json_object_set_new fails on a key that is not valid UTF-8 (and on OOM).
        if (json_object_set_new(root, e->name, ent)) {
            tb_fail(err, "%s: tensor '%s': name is not valid UTF-8 (or out of memory)", path,
                    name);
            goto fail;
        }
        offset += (uint64_t)bytes;
    }
    return root;
oom:
    tb_fail(err, "%s: out of memory building the header", path);
fail:
    json_decref(root);
    return NULL;
}

// fsyncs the directory holding path, so a rename into it survives a crash.
static int fsync_parent_dir(const char *path, tb_error *err) {
    const char *slash = strrchr(path, '/');
    char *dir = slash ? tb_xstrndup(path, slash == path ? 1 : (size_t)(slash - path), "directory name")
                      : tb_xstrdup(".", "directory name");
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    int rc = 0;
    if (fd < 0 || fsync(fd) != 0)
        rc = tb_fail(err, "%s: written and renamed, but fsync of directory '%s' failed: %s",
                     path, dir, strerror(errno));
    if (fd >= 0) close(fd);
    free(dir);
    return rc;
}

static double seconds_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int tb_safetensors_write(const char *path, const tb_st_entry *entries, int n,
                         json_t *metadata, tb_error *err) {
    return tb_safetensors_write_from(path, entries, n, metadata, NULL, NULL, err);
}

int tb_safetensors_write_timed(const char *path, const tb_st_entry *entries, int n, json_t *metadata,
                               double seconds[3], tb_error *err) {
    return tb_safetensors_write_from(path, entries, n, metadata, NULL, seconds, err);
}

int tb_safetensors_write_from(const char *path, const tb_st_entry *entries, int n, json_t *metadata,
                              const tb_st_source *source, double seconds[3], tb_error *err) {
    double t0 = seconds_now(), t1 = t0, t2 = t0;
    json_t *root = build_header(path, entries, n, metadata, source != NULL, err);
    if (!root) return -1;
    char *json = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!json) return tb_fail(err, "%s: cannot serialise the header", path);

    // Pad with spaces so the data buffer (at 8 + N) starts on an 8-byte boundary.
    size_t jlen = strlen(json);
    uint64_t hlen = (jlen + 7) & ~(size_t)7;
    char *tmp = NULL;
    FILE *fp = NULL;
    int rc = -1;

    size_t tmpsize = strlen(path) + 32;
    tmp = tb_xmalloc(tmpsize, "temporary file name");
    snprintf(tmp, tmpsize, "%s.tmp.%ld", path, (long)getpid());
    fp = fopen(tmp, "wb");
    if (!fp) {
        tb_fail(err, "%s: cannot create temporary file '%s': %s", path, tmp, strerror(errno));
        goto done;
    }

    static const char spaces[] = "        ";
    t1 = seconds_now();
    int ok = fwrite(&hlen, 8, 1, fp) == 1 && fwrite(json, 1, jlen, fp) == jlen &&
             fwrite(spaces, 1, hlen - jlen, fp) == hlen - jlen;
    for (int i = 0; ok && i < n; i++) {
        size_t numel = (size_t)shape_bytes(entries[i].shape, entries[i].ndim, 1);
        const float *data = source ? source->fetch(source->ctx, i, &entries[i]) : entries[i].data;
        if (numel && !data) {
            tb_fail(err, "%s: tensor '%s': its source gave no data", path, entries[i].name);
            goto done;
        }
        if (numel) ok = fwrite(data, sizeof(float), numel, fp) == numel;
    }
    // fflush moves stdio's buffer to the kernel; fsync moves the kernel's to the disk.
    // Both must succeed before the rename, or a crash could leave a renamed, empty file.
    ok = ok && fflush(fp) == 0;
    t2 = seconds_now();
    if (!ok || fsync(fileno(fp)) != 0) {
        tb_fail(err, "%s: writing temporary file '%s' failed: %s", path, tmp, strerror(errno));
        goto done;
    }
    FILE *f = fp;
    fp = NULL;
    if (fclose(f) != 0) {
        tb_fail(err, "%s: closing temporary file '%s' failed: %s", path, tmp, strerror(errno));
        goto done;
    }
    if (rename(tmp, path) != 0) {
        tb_fail(err, "%s: renaming temporary file '%s' over it failed: %s", path, tmp,
                strerror(errno));
        goto done;
    }
    free(tmp);
    tmp = NULL;  // renamed: nothing to remove any more
    rc = fsync_parent_dir(path, err);
    if (seconds) seconds[0] = t1 - t0, seconds[1] = t2 - t1, seconds[2] = seconds_now() - t2;

done:
    if (fp) fclose(fp);
    if (tmp) {
        unlink(tmp);
        free(tmp);
    }
    free(json);
    return rc;
}
