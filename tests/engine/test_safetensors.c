// test_safetensors.c — the safetensors reader and writer: round trips, half-precision
// decoding and the crash-safety of writes. (Every kind of malformed file refused:
// test_safetensors_refusals.c.)
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/safetensors.h"
#include "safetensors_cases.h"
#include "tb_shell.h"
#include "tb_test.h"

// TB_REQUIRE evaluates its condition twice, so calls with effects (open, write) are made
// first and only their results are required.

// ---------------------------------------------------------------------------------------
// round trips

TB_TEST(round_trip_preserves_names_shapes_dtypes_data_bitwise_and_metadata) {
    char path[512];
    tmp_path(path, sizeof path, "roundtrip");

    float a[3 * 5], b[7], s[1], c[2 * 3 * 4];
    for (int i = 0; i < 15; i++) a[i] = (float)i * 0.25f - 1.0f;
    for (int i = 0; i < 24; i++) c[i] = 1.0f / (float)(i + 1);
    // values whose bits a lossy path would change
    b[0] = -0.0f;
    b[1] = float_of(0x7fc12345u);  // NaN with a payload
    b[2] = float_of(0x00000001u);  // smallest subnormal
    b[3] = INFINITY;
    b[4] = -INFINITY;
    b[5] = 3.4028235e38f;
    b[6] = 1e-30f;
    s[0] = 42.5f;

    tb_st_entry entries[] = {
        {.name = "h.0.attn.c_attn.weight", .ndim = 2, .shape = {3, 5}, .data = a},
        {.name = "ln_f.bias", .ndim = 1, .shape = {7}, .data = b},
        {.name = "scalar", .ndim = 0, .data = s},
        {.name = "empty", .ndim = 2, .shape = {0, 4}, .data = NULL},
        {.name = "cube", .ndim = 3, .shape = {2, 3, 4}, .data = c},
    };
    const int n = (int)(sizeof entries / sizeof entries[0]);
    json_t *md = json_pack("{s:s, s:s}", "format", "pt", "step", "100");
    tb_error err = {{0}};
    int rc = tb_safetensors_write(path, entries, n, md, &err);
    TB_REQUIRE(rc == 0, "write failed: %s", err.msg);

    char tmp[600];
    TB_CHECK(!tb_exists(tmp_sibling(tmp, sizeof tmp, path)), "temporary file %s left behind", tmp);

    tb_safetensors st;
    rc = tb_safetensors_open(&st, path, &err);
    TB_REQUIRE(rc == 0, "open failed: %s", err.msg);
    TB_CHECK(st.data_start % 8 == 0, "data buffer starts at %llu, not 8-byte aligned",
             (unsigned long long)st.data_start);
    TB_CHECK(st.data_start == 8 + st.header_len, "data_start %llu != 8 + header_len %llu",
             (unsigned long long)st.data_start, (unsigned long long)st.header_len);
    TB_CHECK(st.ntensors == n, "ntensors %d, wrote %d", st.ntensors, n);
    TB_CHECK(st.metadata && json_equal(st.metadata, md), "metadata not preserved");

    // Written in entry order, so the data lies in entry order: contiguous, no gaps.
    uint64_t expect_begin = 0;
    for (int i = 0; i < n; i++) {
        const tb_st_tensor *t = tb_safetensors_find(&st, entries[i].name);
        TB_REQUIRE(t, "tensor '%s' missing", entries[i].name);
        TB_CHECK(strcmp(t->dtype, "F32") == 0, "'%s' dtype %s", t->name, t->dtype);
        TB_CHECK(t->ndim == entries[i].ndim, "'%s' ndim %d, wrote %d", t->name, t->ndim,
                 entries[i].ndim);
        for (int d = 0; d < t->ndim; d++)
            TB_CHECK(t->shape[d] == entries[i].shape[d], "'%s' dim %d is %lld", t->name, d,
                     (long long)t->shape[d]);
        int64_t numel = tb_st_tensor_numel(t);
        TB_CHECK(t->begin == expect_begin, "'%s' begins at %llu, expected %llu", t->name,
                 (unsigned long long)t->begin, (unsigned long long)expect_begin);
        TB_CHECK(t->end - t->begin == (uint64_t)numel * 4, "'%s' byte count", t->name);
        expect_begin = t->end;

        float got[32];
        memset(got, 0xAB, sizeof got);
        rc = tb_safetensors_read_f32(&st, t, got, &err);
        TB_CHECK(rc == 0, "read of '%s' failed: %s", t->name, err.msg);
        if (numel) TB_CHECK(memcmp(got, entries[i].data, (size_t)numel * 4) == 0,
                            "'%s' data differs bitwise", t->name);
    }
    TB_CHECK(tb_st_tensor_numel(tb_safetensors_find(&st, "scalar")) == 1, "scalar numel");
    TB_CHECK(tb_st_tensor_numel(tb_safetensors_find(&st, "empty")) == 0, "empty numel");
    TB_CHECK(bits_of(b[1]) == 0x7fc12345u, "test data intact");
    tb_safetensors_close(&st);
    tb_safetensors_close(&st);  // closing twice is harmless
    json_decref(md);
    unlink(path);
}

TB_TEST(round_trip_with_no_tensors_and_no_metadata) {
    int rc;
    char path[512];
    tmp_path(path, sizeof path, "empty_file");
    tb_error err = {{0}};
    rc = tb_safetensors_write(path, NULL, 0, NULL, &err);
    TB_REQUIRE(rc == 0, "write: %s", err.msg);
    tb_safetensors st;
    rc = tb_safetensors_open(&st, path, &err);
    TB_REQUIRE(rc == 0, "open: %s", err.msg);
    TB_CHECK(st.ntensors == 0, "ntensors %d", st.ntensors);
    TB_CHECK(st.metadata == NULL, "no metadata expected");
    TB_CHECK(st.data_start % 8 == 0, "data start %llu unaligned",
             (unsigned long long)st.data_start);
    TB_CHECK(tb_safetensors_find(&st, "x") == NULL, "find on an empty file");
    tb_safetensors_close(&st);
    unlink(path);
}

TB_TEST(write_replaces_an_existing_file) {
    int rc;
    char path[512];
    tmp_path(path, sizeof path, "replace");
    float one[4] = {1, 2, 3, 4}, two[2] = {5, 6};
    tb_st_entry e1 = {.name = "w", .ndim = 1, .shape = {4}, .data = one};
    tb_st_entry e2 = {.name = "v", .ndim = 2, .shape = {1, 2}, .data = two};
    tb_error err = {{0}};
    rc = tb_safetensors_write(path, &e1, 1, NULL, &err);
    TB_REQUIRE(rc == 0, "write 1: %s", err.msg);
    rc = tb_safetensors_write(path, &e2, 1, NULL, &err);
    TB_REQUIRE(rc == 0, "write 2: %s", err.msg);
    tb_safetensors st;
    rc = tb_safetensors_open(&st, path, &err);
    TB_REQUIRE(rc == 0, "open: %s", err.msg);
    TB_CHECK(st.ntensors == 1 && tb_safetensors_find(&st, "v") && !tb_safetensors_find(&st, "w"),
             "the second write replaced the first");
    float got[2] = {0};
    TB_CHECK(tb_safetensors_read_f32(&st, tb_safetensors_find(&st, "v"), got, &err) == 0,
             "read: %s", err.msg);
    TB_CHECK(got[0] == 5 && got[1] == 6, "got %g %g", got[0], got[1]);
    tb_safetensors_close(&st);
    unlink(path);
}

TB_TEST(tensors_are_sorted_by_data_offset_whatever_the_header_order) {
    int rc;
    char path[512];
    tmp_path(path, sizeof path, "order");
    // Listed last-to-first in the header, and with a gap between them: both allowed.
    const char *header =
        "{\"z_last\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]},"
        "\"a_middle\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]},"
        "\"m_first\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    float data[6] = {1, 2, 3, -1, 4, 5};
    write_st(path, header, data, sizeof data);
    tb_safetensors st;
    tb_error err = {{0}};
    rc = tb_safetensors_open(&st, path, &err);
    TB_REQUIRE(rc == 0, "open: %s", err.msg);
    TB_REQUIRE(st.ntensors == 3, "ntensors %d", st.ntensors);
    TB_CHECK(strcmp(st.tensors[0].name, "m_first") == 0, "[0] is %s", st.tensors[0].name);
    TB_CHECK(strcmp(st.tensors[1].name, "a_middle") == 0, "[1] is %s", st.tensors[1].name);
    TB_CHECK(strcmp(st.tensors[2].name, "z_last") == 0, "[2] is %s", st.tensors[2].name);
    TB_CHECK(tb_safetensors_find(&st, "nope") == NULL, "find of a missing name is NULL");
    float got[2];
    TB_CHECK(tb_safetensors_read_f32(&st, tb_safetensors_find(&st, "z_last"), got, &err) == 0,
             "read: %s", err.msg);
    TB_CHECK(got[0] == 4 && got[1] == 5, "z_last = %g %g", got[0], got[1]);
    tb_safetensors_close(&st);
    unlink(path);
}

// ---------------------------------------------------------------------------------------
// half-precision decoding

// Writes one 1-D tensor of `dtype` holding the given 16-bit patterns, opens it and reads it
// as floats into out.
static int read_halves(const char *tag, const char *dtype, const uint16_t *h, int n, float *out) {
    char path[512], header[256];
    tmp_path(path, sizeof path, tag);
    snprintf(header, sizeof header,
             "{\"x\":{\"dtype\":\"%s\",\"shape\":[%d],\"data_offsets\":[0,%d]}}", dtype, n,
             2 * n);
    write_st(path, header, h, (size_t)n * 2);
    tb_safetensors st;
    tb_error err = {{0}};
    int rc = tb_safetensors_open(&st, path, &err);
    if (rc == 0) rc = tb_safetensors_read_f32(&st, tb_safetensors_find(&st, "x"), out, &err);
    if (rc) printf("    %s\n", err.msg);
    tb_safetensors_close(&st);
    unlink(path);
    return rc;
}

TB_TEST(f16_decodes_known_bit_patterns) {
    int rc;
    const uint16_t h[] = {0x3C00, 0xC100, 0x0000, 0x8000, 0x0001, 0x03FF,
                          0x7BFF, 0x7C00, 0xFC00, 0x7E00, 0x3555, 0x0400};
    const float want[] = {1.0f, -2.5f, 0.0f, -0.0f, 0x1p-24f, 1023 * 0x1p-24f,
                          65504.0f, INFINITY, -INFINITY, NAN, 0x1.554p-2f, 0x1p-14f};
    float got[12];
    rc = read_halves("f16", "F16", h, 12, got);
    TB_REQUIRE(rc == 0, "read failed");
    for (int i = 0; i < 12; i++) {
        if (isnan(want[i])) TB_CHECK(isnan(got[i]), "0x%04x -> %g, want NaN", h[i], got[i]);
        else TB_CHECK(bits_of(got[i]) == bits_of(want[i]), "0x%04x -> %a, want %a", h[i],
                      got[i], want[i]);
    }
}

TB_TEST(bf16_decodes_known_bit_patterns) {
    int rc;
    const uint16_t h[] = {0x3F80, 0xC020, 0x0000, 0x8000, 0x0001, 0x7F80, 0xFF80, 0x7FC0,
                          0x7F7F};
    const float want[] = {1.0f, -2.5f, 0.0f, -0.0f, 0x1p-133f, INFINITY, -INFINITY, NAN,
                          0x1.FEp127f};
    float got[9];
    rc = read_halves("bf16", "BF16", h, 9, got);
    TB_REQUIRE(rc == 0, "read failed");
    for (int i = 0; i < 9; i++) {
        if (isnan(want[i])) TB_CHECK(isnan(got[i]), "0x%04x -> %g, want NaN", h[i], got[i]);
        else TB_CHECK(bits_of(got[i]) == bits_of(want[i]), "0x%04x -> %a, want %a", h[i],
                      got[i], want[i]);
    }
}

// All 65536 halves, larger than the reader's 64K-element staging chunk so the chunk loop
// runs twice, checked against the compiler's own _Float16 conversion where it has one.
TB_TEST(f16_decodes_every_bit_pattern_across_chunks) {
    int rc;
    enum { N = 65536 + 3 };
    uint16_t *h = malloc(N * sizeof *h);
    float *got = malloc(N * sizeof *got);
    for (int i = 0; i < N; i++) h[i] = (uint16_t)i;
    rc = read_halves("f16_all", "F16", h, N, got);
    TB_REQUIRE(rc == 0, "read failed");
    int bad = 0;
    for (int i = 0; i < N && bad < 5; i++) {
        float want;
#ifdef __FLT16_MAX__
        _Float16 f16;
        memcpy(&f16, &h[i], 2);
        want = (float)f16;
#else
        // reference: sign * 2^(e-15) * (1 + m/1024), subnormals 2^-14 * m/1024
        int e = (h[i] >> 10) & 31, m = h[i] & 1023;
        want = e == 31 ? (m ? NAN : INFINITY)
                       : (e ? ldexpf(1.0f + (float)m / 1024, e - 15) : ldexpf((float)m, -24));
        if (h[i] & 0x8000) want = -want;
#endif
        int ok = isnan(want) ? isnan(got[i]) && (signbit(got[i]) == signbit(want))
                             : bits_of(got[i]) == bits_of(want);
        if (!ok) bad++;
        TB_CHECK(ok, "0x%04x -> %a, want %a", h[i], got[i], want);
    }
    free(h);
    free(got);
}

TB_TEST(read_of_unsupported_dtype_fails_naming_dtype_and_tensor) {
    int rc;
    char path[512];
    tmp_path(path, sizeof path, "i32");
    int32_t v[3] = {1, 2, 3};
    write_st(path, "{\"ids\":{\"dtype\":\"I32\",\"shape\":[3],\"data_offsets\":[0,12]}}", v,
             sizeof v);
    tb_safetensors st;
    tb_error err = {{0}};
    rc = tb_safetensors_open(&st, path, &err);
    TB_REQUIRE(rc == 0, "an I32 file is valid: %s", err.msg);
    float got[3];
    TB_CHECK(tb_safetensors_read_f32(&st, &st.tensors[0], got, &err) == -1, "read should fail");
    TB_CHECK(strstr(err.msg, "dtype I32 of tensor 'ids' is not supported yet"), "msg: %s",
             err.msg);
    TB_CHECK(strstr(err.msg, path), "msg names the path: %s", err.msg);
    tb_safetensors_close(&st);
    unlink(path);
}

TB_TEST(read_of_file_truncated_after_open_fails_naming_offset) {
    int rc;
    char path[512];
    tmp_path(path, sizeof path, "truncated_later");
    float data[4] = {1, 2, 3, 4};
    const char *header = "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}";
    write_st(path, header, data, sizeof data);
    tb_safetensors st;
    tb_error err = {{0}};
    rc = tb_safetensors_open(&st, path, &err);
    TB_REQUIRE(rc == 0, "open: %s", err.msg);
    uint64_t end_of_file = 8 + strlen(header) + 8;  // two of the four floats left
    rc = truncate(path, (off_t)end_of_file);
    TB_REQUIRE(rc == 0, "truncate: %s", strerror(errno));
    float got[4];
    TB_CHECK(tb_safetensors_read_f32(&st, &st.tensors[0], got, &err) == -1, "read should fail");
    char frag[64];
    snprintf(frag, sizeof frag, "byte offset %llu", (unsigned long long)end_of_file);
    TB_CHECK(strstr(err.msg, frag) && strstr(err.msg, "'w'") && strstr(err.msg, path),
             "message names path, tensor and %s: %s", frag, err.msg);
    tb_safetensors_close(&st);
    unlink(path);
}

// ---------------------------------------------------------------------------------------
// crash-safe writes

TB_TEST(write_to_a_missing_directory_fails_and_leaves_nothing) {
    char dir[512], path[600], tmp[700];
    snprintf(dir, sizeof dir, "%s/safetensors_no_such_dir", TB_TEST_TMPDIR);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    rmdir(dir);
    float x = 1;
    tb_st_entry e = {.name = "x", .ndim = 1, .shape = {1}, .data = &x};
    tb_error err = {{0}};
    TB_CHECK(tb_safetensors_write(path, &e, 1, NULL, &err) == -1, "write should fail");
    TB_CHECK(strstr(err.msg, path) && strstr(err.msg, "No such file"), "msg: %s", err.msg);
    TB_CHECK(!tb_exists(path) && !tb_exists(tmp_sibling(tmp, sizeof tmp, path)) && !tb_exists(dir),
             "nothing created");
}

// Writes a good file, then for each bad write checks that it fails with the fragment in
// its message and leaves the good file byte-for-byte as it was and no temporary file.
TB_TEST(write_rejects_bad_entries_and_leaves_existing_file_untouched) {
    int rc;
    char path[512], tmp[600];
    tmp_path(path, sizeof path, "keep");
    tmp_sibling(tmp, sizeof tmp, path);
    float good[6] = {1, 2, 3, 4, 5, 6};
    tb_st_entry ok = {.name = "good", .ndim = 2, .shape = {2, 3}, .data = good};
    tb_error err = {{0}};
    rc = tb_safetensors_write(path, &ok, 1, NULL, &err);
    TB_REQUIRE(rc == 0, "write: %s", err.msg);
    size_t before_len = 0;
    char *before = tb_slurp_len(path, &before_len);
    TB_REQUIRE(before, "cannot read back %s", path);

    struct {
        tb_st_entry e[2];
        int n;
        json_t *md;
        const char *frag;
    } cases[] = {
        {{{.name = "t", .ndim = TB_ST_MAX_DIMS + 1, .data = good}}, 1, NULL, "ndim 9 out of range"},
        {{{.name = "t", .ndim = -1, .data = good}}, 1, NULL, "ndim -1 out of range"},
        {{{.name = "t", .ndim = 2, .shape = {3, -2}, .data = good}}, 1, NULL,
         "tensor 't': shape [3, -2] has negative dim 1"},
        {{{.name = "t", .ndim = 1, .shape = {6}, .data = NULL}}, 1, NULL,
         "tensor 't': data is NULL but shape [6] holds 6 floats"},
        {{{.name = "t", .ndim = 1, .shape = {1}, .data = good},
          {.name = "t", .ndim = 1, .shape = {1}, .data = good}}, 2, NULL,
         "entry 1 repeats the name"},
        {{{.name = "__metadata__", .ndim = 1, .shape = {1}, .data = good}}, 1, NULL,
         "reserved"},
        {{{.name = "", .ndim = 1, .shape = {1}, .data = good}}, 1, NULL, "empty name"},
        {{{.name = "bad\xff", .ndim = 1, .shape = {1}, .data = good}}, 1, NULL, "UTF-8"},
        {{{.name = "t", .ndim = 1, .shape = {1}, .data = good}}, 1,
         json_pack("{s:i}", "step", 100), "\"__metadata__\" key 'step' has the value 100"},
        {{{.name = "t", .ndim = 1, .shape = {1}, .data = good}}, -3, NULL, "-3 tensors"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        memset(&err, 0, sizeof err);
        rc = tb_safetensors_write(path, cases[i].e, cases[i].n, cases[i].md, &err);
        TB_CHECK(rc == -1, "case %zu should fail", i);
        TB_CHECK(strstr(err.msg, path) && strstr(err.msg, cases[i].frag),
                 "case %zu: message names the path and \"%s\": %s", i, cases[i].frag, err.msg);
        size_t after_len = 0;
        char *after = tb_slurp_len(path, &after_len);
        TB_CHECK(after && after_len == before_len && memcmp(after, before, before_len) == 0,
                 "case %zu: existing file changed", i);
        TB_CHECK(!tb_exists(tmp), "case %zu: temporary file %s left behind", i, tmp);
        free(after);
        if (cases[i].md) json_decref(cases[i].md);
    }
    free(before);
    unlink(path);
}

// A write that fails after the temporary file has been started (here: the file-size limit
// is hit half way, as on a full disk) removes the temporary file and keeps the old one.
TB_TEST(write_failing_midway_keeps_old_file_and_removes_temp) {
    int rc;
    char path[512], tmp[600];
    tmp_path(path, sizeof path, "midway");
    tmp_sibling(tmp, sizeof tmp, path);
    float small[2] = {7, 8};
    tb_st_entry ok = {.name = "small", .ndim = 1, .shape = {2}, .data = small};
    tb_error err = {{0}};
    rc = tb_safetensors_write(path, &ok, 1, NULL, &err);
    TB_REQUIRE(rc == 0, "write: %s", err.msg);
    size_t before_len = 0;
    char *before = tb_slurp_len(path, &before_len);

    enum { N = 1 << 16 };  // 256 KB of floats, well past the limit
    float *big = calloc(N, sizeof *big);
    tb_st_entry e = {.name = "big", .ndim = 1, .shape = {N}, .data = big};
    struct rlimit old;
    getrlimit(RLIMIT_FSIZE, &old);
    struct rlimit lim = {.rlim_cur = 64 * 1024, .rlim_max = old.rlim_max};
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);  // get EFBIG, not a killed process
    int set = setrlimit(RLIMIT_FSIZE, &lim);
    rc = tb_safetensors_write(path, &e, 1, NULL, &err);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, old_handler);
    TB_REQUIRE(set == 0, "setrlimit: %s", strerror(errno));

    TB_CHECK(rc == -1, "write past the file-size limit should fail");
    TB_CHECK(strstr(err.msg, path) && strstr(err.msg, tmp) && strstr(err.msg, "File too large"),
             "message names the path, the temporary file and the cause: %s", err.msg);
    size_t after_len = 0;
    char *after = tb_slurp_len(path, &after_len);
    TB_CHECK(after && after_len == before_len && memcmp(after, before, before_len) == 0,
             "existing file changed");
    TB_CHECK(!tb_exists(tmp), "temporary file %s left behind", tmp);
    free(after);
    free(before);
    free(big);
    unlink(path);
}

// A source (tb_safetensors_write_from): fetch called once per entry, in order, the entries'
// data unread; the file the same bytes as a write of the data; a fetch without data fails,
// naming the tensor, and leaves no file.
typedef struct counting_source {
    const float *const *data;
    int calls, order_ok, fail_at;
} counting_source;

static const float *fetch_counting(void *ctx, int i, const tb_st_entry *e) {
    counting_source *c = ctx;
    c->order_ok &= i == c->calls && e->data == NULL;
    c->calls++;
    return i == c->fail_at ? NULL : c->data[i];
}

TB_TEST(write_from_a_source_fetches_each_entry_once_in_order) {
    char a[512], b[512];
    tmp_path(a, sizeof a, "source-data");
    tmp_path(b, sizeof b, "source-fetched");
    float x[3] = {1.5f, -2, 3}, y[4] = {4, 5, 6, 7.25f}, z[1] = {0};
    const float *data[3] = {x, y, z};
    tb_st_entry with[3] = {{.name = "x", .ndim = 1, .shape = {3}, .data = x},
                           {.name = "y", .ndim = 2, .shape = {2, 2}, .data = y},
                           {.name = "empty", .ndim = 1, .shape = {0}, .data = NULL}};
    tb_st_entry without[3];
    memcpy(without, with, sizeof with);
    for (int i = 0; i < 3; i++) without[i].data = NULL;
    tb_error err = {{0}};
    int rc = tb_safetensors_write(a, with, 3, NULL, &err);
    TB_REQUIRE(rc == 0, "write: %s", err.msg);
    counting_source c = {data, 0, 1, -1};
    const tb_st_source src = {fetch_counting, &c};
    rc = tb_safetensors_write_from(b, without, 3, NULL, &src, NULL, &err);
    TB_REQUIRE(rc == 0, "write_from: %s", err.msg);
    TB_CHECK(c.calls == 3 && c.order_ok, "fetch called %d times (want 3, in order, data unread: %d)", c.calls,
             c.order_ok);
    size_t la = 0, lb = 0;
    char *fa = tb_slurp_len(a, &la), *fb = tb_slurp_len(b, &lb);
    TB_CHECK(fa && fb && la == lb && memcmp(fa, fb, la) == 0, "the fetched file differs from the written one");
    free(fa), free(fb);
    unlink(b);
    counting_source bad = {data, 0, 1, 1};
    const tb_st_source bad_src = {fetch_counting, &bad};
    rc = tb_safetensors_write_from(b, without, 3, NULL, &bad_src, NULL, &err);
    TB_CHECK(rc == -1 && strstr(err.msg, "'y'") && strstr(err.msg, "no data"), "a fetch without data: %d, %s", rc,
             err.msg);
    TB_CHECK(!tb_exists(b) && bad.calls == 2, "nothing left at %s; fetch stopped after the failure (%d calls)", b,
             bad.calls);
    unlink(a);
}

int main(void) {
    TB_RUN(round_trip_preserves_names_shapes_dtypes_data_bitwise_and_metadata);
    TB_RUN(round_trip_with_no_tensors_and_no_metadata);
    TB_RUN(write_replaces_an_existing_file);
    TB_RUN(write_from_a_source_fetches_each_entry_once_in_order);
    TB_RUN(tensors_are_sorted_by_data_offset_whatever_the_header_order);
    TB_RUN(f16_decodes_known_bit_patterns);
    TB_RUN(bf16_decodes_known_bit_patterns);
    TB_RUN(f16_decodes_every_bit_pattern_across_chunks);
    TB_RUN(read_of_unsupported_dtype_fails_naming_dtype_and_tensor);
    TB_RUN(read_of_file_truncated_after_open_fails_naming_offset);
    TB_RUN(write_to_a_missing_directory_fails_and_leaves_nothing);
    TB_RUN(write_rejects_bad_entries_and_leaves_existing_file_untouched);
    TB_RUN(write_failing_midway_keeps_old_file_and_removes_temp);
    return tb_test_summary();
}
