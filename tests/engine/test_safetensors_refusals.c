// test_safetensors_refusals.c — the safetensors reader refuses every kind of malformed file
// (missing, a directory, a FIFO or a device, truncated, a header that is not JSON or not an
// object, duplicate names, bad offsets, shapes, dtypes, overlaps, trailing bytes, metadata
// that is not strings) with a message that says where and what. (Round trips and writes:
// test_safetensors.c.)
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

// ---------------------------------------------------------------------------------------
// malformed files

TB_TEST(open_refuses_missing_file) {
    char path[512];
    tmp_path(path, sizeof path, "does_not_exist");
    unlink(path);
    EXPECT_OPEN_FAILS(path, "No such file");
}

TB_TEST(open_refuses_a_directory) {
    EXPECT_OPEN_FAILS(TB_TEST_TMPDIR, "not a regular file");
}

// Opens the file named by arg in this (child) process; the message goes to out. Exit status
// 0: refused, 1: opened.
static int open_in_child(void *arg, char *out, size_t len) {
    tb_safetensors st;
    tb_error err = {{0}};
    int rc = tb_safetensors_open(&st, arg, &err);
    snprintf(out, len, "%s", err.msg);
    if (rc == 0) tb_safetensors_close(&st);
    return rc == 0;
}

TB_TEST(open_refuses_a_fifo_and_a_device_by_kind_before_any_open) {
    char fifo[512];
    tmp_path(fifo, sizeof fifo, "fifo");
    unlink(fifo);
    TB_REQUIRE(mkfifo(fifo, 0644) == 0, "mkfifo %s: %s", fifo, strerror(errno));
    const char *paths[] = {fifo, "/dev/zero"};
    const char *kinds[] = {"is a FIFO (named pipe), not a regular file (a safetensors file is expected)",
                           "is a character device, not a regular file"};
    for (int i = 0; i < 2; i++) {
        // in a child ended after 10 s: opening a FIFO with no writer blocks forever
        char msg[2048];
        int rc = tb_call_bounded(open_in_child, (void *)paths[i], 10, msg, sizeof msg);
        TB_CHECK(rc == 0, "%s: exit %d (142: still blocked after 10 s, 1: opened): \"%s\"", paths[i], rc, msg);
        TB_CHECK(strstr(msg, paths[i]) && strstr(msg, kinds[i]), "%s: want \"%s\", got \"%s\"", paths[i], kinds[i],
                 msg);
    }
    unlink(fifo);
}

TB_TEST(open_refuses_file_shorter_than_8_bytes) {
    char path[512];
    tmp_path(path, sizeof path, "short");
    write_bytes(path, "\x10\0\0\0", 4);
    EXPECT_OPEN_FAILS(path, "file is 4 bytes", "byte offset 0");
    write_bytes(path, "", 0);
    EXPECT_OPEN_FAILS(path, "file is 0 bytes");
    unlink(path);
}

TB_TEST(open_refuses_header_length_past_end_of_file) {
    char path[512];
    tmp_path(path, sizeof path, "long_header");
    unsigned char bytes[8 + 20] = {0};
    uint64_t n = 1000;
    memcpy(bytes, &n, 8);
    memcpy(bytes + 8, "{}                  ", 20);
    write_bytes(path, bytes, sizeof bytes);
    EXPECT_OPEN_FAILS(path, "header length 1000", "byte offset 0", "file is 28 bytes",
                      "at most 20");
    unlink(path);
}

TB_TEST(open_refuses_absurd_header_length) {
    char path[512];
    tmp_path(path, sizeof path, "huge_header");
    // e.g. a text file: "PK\3\4..." or "version " read as a length is astronomically large
    write_bytes(path, "version https://git-lfs.github.com/spec/v1\n", 44);
    EXPECT_OPEN_FAILS(path, "exceeds the limit of 100000000 bytes", "byte offset 0");
    unlink(path);
}

TB_TEST(open_refuses_header_that_is_not_json) {
    char path[512];
    tmp_path(path, sizeof path, "not_json");
    // the stray 'x' is the 12th header byte: file byte offset 8 + 11 = 19
    write_st(path, "{\"a\": [1, 2x]}", NULL, 0);
    EXPECT_OPEN_FAILS(path, "not valid JSON", "byte offset 19");
    write_st(path, "", NULL, 0);
    EXPECT_OPEN_FAILS(path, "not valid JSON");
    unlink(path);
}

TB_TEST(open_refuses_header_that_is_not_an_object) {
    char path[512];
    tmp_path(path, sizeof path, "not_object");
    write_st(path, "[1, 2, 3]", NULL, 0);
    EXPECT_OPEN_FAILS(path, "must be a JSON object", "[1,2,3]");
    unlink(path);
}

TB_TEST(open_refuses_duplicate_tensor_names) {
    char path[512];
    tmp_path(path, sizeof path, "duplicate");
    float d[2] = {0};
    write_st(path,
             "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
             "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
             d, sizeof d);
    EXPECT_OPEN_FAILS(path, "duplicate", "w");
    unlink(path);
}

TB_TEST(open_refuses_entry_missing_data_offsets) {
    char path[512];
    tmp_path(path, sizeof path, "no_offsets");
    float d[1] = {0};
    write_st(path, "{\"wte.weight\":{\"dtype\":\"F32\",\"shape\":[1]}}", d, sizeof d);
    EXPECT_OPEN_FAILS(path, "tensor 'wte.weight'", "no \"data_offsets\"");
    write_st(path, "{\"wte.weight\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}",
             d, sizeof d);
    EXPECT_OPEN_FAILS(path, "tensor 'wte.weight'", "[begin, end]", "got [0]");
    write_st(path, "{\"wte.weight\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}",
             d, sizeof d);
    EXPECT_OPEN_FAILS(path, "tensor 'wte.weight'", "non-negative", "got [-4,0]");
    unlink(path);
}

TB_TEST(open_refuses_offsets_past_end_of_file) {
    char path[512];
    tmp_path(path, sizeof path, "past_end");
    const char *header = "{\"wpe.weight\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}";
    float d[3] = {0};  // 12 bytes where the header promises 16
    write_st(path, header, d, sizeof d);
    char at[64], size[64];
    snprintf(at, sizeof at, "end at file byte offset %zu", 8 + strlen(header) + 16);
    snprintf(size, sizeof size, "the file is %zu bytes", 8 + strlen(header) + 12);
    EXPECT_OPEN_FAILS(path, "tensor 'wpe.weight'", "data_offsets [0, 16]", at, size);
    unlink(path);
}

TB_TEST(open_refuses_begin_after_end) {
    char path[512];
    tmp_path(path, sizeof path, "backwards");
    float d[4] = {0};
    write_st(path, "{\"b\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[16,8]}}", d,
             sizeof d);
    EXPECT_OPEN_FAILS(path, "tensor 'b'", "data_offsets [16, 8]", "begin after end");
    unlink(path);
}

TB_TEST(open_refuses_byte_count_that_does_not_match_shape) {
    char path[512];
    tmp_path(path, sizeof path, "bad_size");
    unsigned char d[100] = {0};
    write_st(path,
             "{\"h.0.attn.c_attn.weight\":{\"dtype\":\"F32\",\"shape\":[768,2304],"
             "\"data_offsets\":[0,100]}}",
             d, sizeof d);
    EXPECT_OPEN_FAILS(path, "tensor 'h.0.attn.c_attn.weight': data_offsets [0, 100] hold 100 "
                            "bytes but shape [768, 2304] of F32 needs 7077888");
    // a dtype size mismatch is the same check: 4 BF16 elements are 8 bytes, not 16
    write_st(path, "{\"x\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[0,16]}}", d,
             sizeof d);
    EXPECT_OPEN_FAILS(path, "hold 16 bytes but shape [4] of BF16 needs 8");
    // a shape whose byte count overflows 64 bits
    write_st(path, "{\"x\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296],"
                   "\"data_offsets\":[0,0]}}", d, sizeof d);
    EXPECT_OPEN_FAILS(path, "tensor 'x'", "overflows");
    unlink(path);
}

TB_TEST(open_refuses_overlapping_tensors) {
    char path[512];
    tmp_path(path, sizeof path, "overlap");
    float d[6] = {0};
    const char *header =
        "{\"first\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
        "\"second\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}";
    write_st(path, header, d, sizeof d);
    char at[64];
    snprintf(at, sizeof at, "byte offset %zu", 8 + strlen(header) + 12);
    EXPECT_OPEN_FAILS(path, "'first' data_offsets [0, 16]", "'second' data_offsets [12, 20]",
                      "overlap", at);
    // a tensor nested inside a longer one that began earlier still overlaps it
    write_st(path,
             "{\"big\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[0,24]},"
             "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
             d, sizeof d);
    EXPECT_OPEN_FAILS(path, "'big'", "'a'", "overlap");
    unlink(path);
}

TB_TEST(open_refuses_trailing_bytes_after_the_last_tensor_naming_range_and_count) {
    char path[512], want[128];
    tmp_path(path, sizeof path, "trailing");
    float d[5] = {1, 2, 3, 4, 5};
    const char *header = "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}";
    write_st(path, header, d, sizeof d);  // one float more than w holds
    size_t start = 8 + strlen(header);
    snprintf(want, sizeof want, "file bytes [%zu, %zu) (4 trailing bytes) belong to no tensor", start + 16, start + 20);
    EXPECT_OPEN_FAILS(path, want, "the last tensor, 'w', has data_offsets [0, 16]");
    // bytes behind a header of empty tensors only, or of none
    header = "{\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}";
    write_st(path, header, d, 3);
    snprintf(want, sizeof want, "file bytes [%zu, %zu) (3 trailing bytes)", 8 + strlen(header), 8 + strlen(header) + 3);
    EXPECT_OPEN_FAILS(path, want, "the header lists no tensor with data");
    write_st(path, "{}", d, 1);
    EXPECT_OPEN_FAILS(path, "file bytes [10, 11) (1 trailing bytes)", "the header lists no tensor with data");
    // the same file without the extra float opens
    header = "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}";
    write_st(path, header, d, 16);
    tb_safetensors st;
    tb_error err = {{0}};
    TB_CHECK(tb_safetensors_open(&st, path, &err) == 0, "open: %s", err.msg);
    tb_safetensors_close(&st);
    unlink(path);
}

TB_TEST(open_allows_empty_tensors_at_any_offset) {
    char path[512];
    tmp_path(path, sizeof path, "empty_inside");
    float d[4] = {0};
    // an empty tensor owns no bytes, so it overlaps nothing even inside another's range
    write_st(path,
             "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
             "\"e\":{\"dtype\":\"F32\",\"shape\":[2,0],\"data_offsets\":[8,8]}}",
             d, sizeof d);
    tb_safetensors st;
    tb_error err = {{0}};
    TB_CHECK(tb_safetensors_open(&st, path, &err) == 0, "open: %s", err.msg);
    tb_safetensors_close(&st);
    unlink(path);
}

TB_TEST(open_refuses_unknown_dtype) {
    char path[512];
    tmp_path(path, sizeof path, "bad_dtype");
    float d[1] = {0};
    write_st(path, "{\"w\":{\"dtype\":\"F7\",\"shape\":[1],\"data_offsets\":[0,4]}}", d, sizeof d);
    EXPECT_OPEN_FAILS(path, "tensor 'w'", "unknown dtype \"F7\"", "known: F64 F32 F16 BF16");
    write_st(path, "{\"w\":{\"dtype\":32,\"shape\":[1],\"data_offsets\":[0,4]}}", d, sizeof d);
    EXPECT_OPEN_FAILS(path, "tensor 'w'", "\"dtype\" must be a string, got 32");
    write_st(path, "{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", d, sizeof d);
    EXPECT_OPEN_FAILS(path, "tensor 'w'", "no \"dtype\"");
    unlink(path);
}

TB_TEST(open_refuses_bad_shapes) {
    char path[512];
    tmp_path(path, sizeof path, "bad_shape");
    float d[1] = {0};
    write_st(path, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1,-1],\"data_offsets\":[0,4]}}", d,
             sizeof d);
    EXPECT_OPEN_FAILS(path, "tensor 'w'", "shape [1,-1]", "dim 1");
    write_st(path, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", d,
             sizeof d);
    EXPECT_OPEN_FAILS(path, "tensor 'w'", "shape [1.5]", "dim 0");
    write_st(path, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],"
                   "\"data_offsets\":[0,4]}}", d, sizeof d);
    EXPECT_OPEN_FAILS(path, "tensor 'w'", "9 dims", "8 supported");
    write_st(path, "{\"w\":{\"dtype\":\"F32\",\"shape\":\"1\",\"data_offsets\":[0,4]}}", d,
             sizeof d);
    EXPECT_OPEN_FAILS(path, "tensor 'w'", "\"shape\" must be an array, got \"1\"");
    write_st(path, "{\"w\":[1,2]}", d, sizeof d);
    EXPECT_OPEN_FAILS(path, "tensor 'w'", "must be an object, got [1,2]");
    unlink(path);
}

TB_TEST(open_refuses_metadata_that_is_not_strings) {
    char path[512];
    tmp_path(path, sizeof path, "bad_metadata");
    write_st(path, "{\"__metadata__\":{\"format\":\"pt\",\"step\":100}}", NULL, 0);
    EXPECT_OPEN_FAILS(path, "\"__metadata__\" key 'step' has the value 100");
    write_st(path, "{\"__metadata__\":\"pt\"}", NULL, 0);
    EXPECT_OPEN_FAILS(path, "\"__metadata__\" must be an object");
    unlink(path);
}

int main(void) {
    TB_RUN(open_refuses_missing_file);
    TB_RUN(open_refuses_a_directory);
    TB_RUN(open_refuses_a_fifo_and_a_device_by_kind_before_any_open);
    TB_RUN(open_refuses_file_shorter_than_8_bytes);
    TB_RUN(open_refuses_header_length_past_end_of_file);
    TB_RUN(open_refuses_absurd_header_length);
    TB_RUN(open_refuses_header_that_is_not_json);
    TB_RUN(open_refuses_header_that_is_not_an_object);
    TB_RUN(open_refuses_duplicate_tensor_names);
    TB_RUN(open_refuses_entry_missing_data_offsets);
    TB_RUN(open_refuses_offsets_past_end_of_file);
    TB_RUN(open_refuses_begin_after_end);
    TB_RUN(open_refuses_byte_count_that_does_not_match_shape);
    TB_RUN(open_refuses_overlapping_tensors);
    TB_RUN(open_refuses_trailing_bytes_after_the_last_tensor_naming_range_and_count);
    TB_RUN(open_allows_empty_tensors_at_any_offset);
    TB_RUN(open_refuses_unknown_dtype);
    TB_RUN(open_refuses_bad_shapes);
    TB_RUN(open_refuses_metadata_that_is_not_strings);
    return tb_test_summary();
}
