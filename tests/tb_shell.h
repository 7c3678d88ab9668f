// tb_shell.h — what tests that drive the project's binaries share: read and write whole
// files, and run a shell command capturing what it prints.
#ifndef TB_SHELL_H
#define TB_SHELL_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>

// The file's contents, NUL-terminated (malloc'd), or NULL when it cannot be read.
static inline char *tb_slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)(n > 0 ? n : 0) + 1);
    size_t got = n > 0 ? fread(s, 1, (size_t)n, f) : 0;
    s[got] = 0;
    fclose(f);
    return s;
}

// Reads at most len - 1 bytes of the file into buf (empty when it cannot be read).
static inline void tb_slurp_into(const char *path, char *buf, size_t len) {
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f) return;
    size_t n = fread(buf, 1, len - 1, f);
    buf[n] = '\0';
    fclose(f);
}

static inline int tb_write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(text, f);
    return fclose(f);
}

static inline int tb_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

// Runs `sh -c CMD` with stdout and stderr going to <scratch>/out.txt; returns the exit status
// (128 when it did not exit normally) and, when output is not NULL, sets *output to what it
// printed (malloc'd, never NULL).
static inline int tb_shell(char **output, const char *scratch, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline int tb_shell(char **output, const char *scratch, const char *fmt, ...) {
    char cmd[8192], full[8192 + 1024 + 16], out[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    snprintf(out, sizeof out, "%s/out.txt", scratch);
    snprintf(full, sizeof full, "%s > '%s' 2>&1", cmd, out);
    int st = system(full);
    if (output) {
        *output = tb_slurp(out);
        if (!*output) *output = calloc(1, 1);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

#endif
