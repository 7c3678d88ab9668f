// safetensors_cases.h — what the safetensors tests share: temporary paths, files written
// byte by byte as a foreign writer makes them, float bit patterns, and the check that an
// open fails naming what and where.
#ifndef TB_TESTS_SAFETENSORS_CASES_H
#define TB_TESTS_SAFETENSORS_CASES_H

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/safetensors.h"
#include "tb_shell.h"
#include "tb_test.h"

static inline const char *tmp_path(char *buf, size_t size, const char *tag) {
    snprintf(buf, size, "%s/safetensors_%s.safetensors", TB_TEST_TMPDIR, tag);
    return buf;
}

static inline void write_bytes(const char *path, const void *bytes, size_t len) {
    if (tb_write_bytes(path, bytes, len) != 0) {
        printf("cannot create %s: %s\n", path, strerror(errno));
        exit(2);
    }
}

// A safetensors file from a header text and a data buffer, as a foreign writer makes it.
static inline void write_st(const char *path, const char *header, const void *data, size_t len) {
    uint64_t n = strlen(header);
    FILE *f = fopen(path, "wb");
    if (!f) {
        printf("cannot create %s: %s\n", path, strerror(errno));
        exit(2);
    }
    fwrite(&n, 8, 1, f);
    fwrite(header, 1, n, f);
    if (len) fwrite(data, 1, len, f);
    fclose(f);
}

static inline const char *tmp_sibling(char *buf, size_t size, const char *path) {
    snprintf(buf, size, "%s.tmp.%ld", path, (long)getpid());
    return buf;
}

static inline uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float float_of(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// Opening `path` must fail, leave st zeroed, and name the path and every one of the
// NULL-terminated fragments in its message.
#define EXPECT_OPEN_FAILS(file_, ...)                                                    \
    do {                                                                                \
        tb_safetensors st_;                                                             \
        tb_error err_ = {{0}};                                                          \
        int rc_ = tb_safetensors_open(&st_, (file_), &err_);                             \
        TB_CHECK(rc_ == -1, "open of %s should fail", (file_));                          \
        TB_CHECK(st_.fp == NULL && st_.tensors == NULL && st_.path == NULL,             \
                 "a failed open leaves the struct closed");                             \
        tb_safetensors_close(&st_);                                                     \
        TB_CHECK(strstr(err_.msg, (file_)) != NULL, "message names the path: %s",        \
                 err_.msg);                                                             \
        const char *frags_[] = {__VA_ARGS__, NULL};                                     \
        for (int i_ = 0; frags_[i_]; i_++)                                              \
            TB_CHECK(strstr(err_.msg, frags_[i_]) != NULL, "message has \"%s\": %s",    \
                     frags_[i_], err_.msg);                                             \
    } while (0)

#endif
