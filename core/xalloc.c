#include "core/xalloc.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"

void tb_host_oom(size_t bytes, const char *what, const char *file, int line) {
    fprintf(stderr, "out of host memory: %zu bytes for %s at %s:%d\n", bytes, what ? what : "?", file, line);
    fflush(NULL);
    // _exit, not exit: other rank threads may be running, and atexit handlers must not
    // race them; stdio was flushed above.
    _exit(TB_EXIT_OUT_OF_MEMORY);
}

// A zero-byte request still returns a unique pointer (malloc may return NULL for 0).
static size_t at_least_one(size_t bytes) { return bytes ? bytes : 1; }

void *tb_xmalloc_at(size_t bytes, const char *what, const char *file, int line) {
    void *p = malloc(at_least_one(bytes));
    if (!p) tb_host_oom(bytes, what, file, line);
    return p;
}

void *tb_xcalloc_at(size_t count, size_t size, const char *what, const char *file, int line) {
    if (size && count > SIZE_MAX / size) tb_host_oom(SIZE_MAX, what, file, line);
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) tb_host_oom(count * size, what, file, line);
    return p;
}

void *tb_xrealloc_at(void *ptr, size_t bytes, const char *what, const char *file, int line) {
    void *p = realloc(ptr, at_least_one(bytes));
    if (!p) tb_host_oom(bytes, what, file, line);
    return p;
}

void *tb_xreallocarray_at(void *ptr, size_t count, size_t size, const char *what, const char *file, int line) {
    if (size && count > SIZE_MAX / size) tb_host_oom(SIZE_MAX, what, file, line);
    return tb_xrealloc_at(ptr, count * size, what, file, line);
}

char *tb_xstrdup_at(const char *s, const char *what, const char *file, int line) {
    size_t n = strlen(s) + 1;
    char *p = tb_xmalloc_at(n, what, file, line);
    memcpy(p, s, n);
    return p;
}

char *tb_xstrndup_at(const char *s, size_t n, const char *what, const char *file, int line) {
    size_t len = strnlen(s, n);
    char *p = tb_xmalloc_at(len + 1, what, file, line);
    memcpy(p, s, len);
    p[len] = '\0';
    return p;
}
