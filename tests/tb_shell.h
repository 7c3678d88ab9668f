// tb_shell.h — what tests that touch files or drive the project's binaries share: read and
// write whole files, scratch paths, JSON files, counting lines, and running a shell command
// capturing what it prints.
//
//   static tb_output sh;  // what the last command printed
//   TB_REQUIRE(tb_run(&sh, TB_SOURCE_DIR, "'%s' run %s", TRACEBOOK, script) == 0, "%s", sh.err);
//   TB_CHECK(strstr(sh.out, "RECORD "), "stdout:\n%s", sh.out);
#ifndef TB_SHELL_H
#define TB_SHELL_H

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef TB_TEST_TMPDIR
#define TB_TEST_TMPDIR "/tmp"
#endif

// --- engine flags ---

// The flag name a word starts ("--seed" of "--seed" and "--seed=7"), into name; 0 when the word
// is no flag.
static inline int tb_flag_name(const char *word, char *name, size_t len) {
    if (strncmp(word, "--", 2) != 0) return 0;
    snprintf(name, len, "%.*s", (int)strcspn(word, "= "), word);
    return 1;
}

// base's flags with those extra gives again left out, then extra — "--hidden-size 32 --seed 1"
// and "--hidden-size 64" make "--seed 1 --hidden-size 64" — for a test that runs a base command
// with a few changed (pretrain_gpt refuses a flag given twice). Words are separated by single
// spaces; a flag's value is the next word when that is no flag. 0, or -1 when out is too small.
static inline int tb_flags_merge(char *out, size_t len, const char *base, const char *extra) {
    char *words = strdup(base ? base : ""), *save = NULL, name[128], other[128];
    size_t at = 0;
    out[0] = '\0';
    int skipping = 0, rc = 0;
    for (char *w = strtok_r(words, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
        if (tb_flag_name(w, name, sizeof name)) {
            skipping = 0;
            char *copy = strdup(extra ? extra : ""), *save2 = NULL;
            for (char *x = strtok_r(copy, " ", &save2); x && !skipping; x = strtok_r(NULL, " ", &save2))
                skipping = tb_flag_name(x, other, sizeof other) && !strcmp(name, other);
            free(copy);
        }
        if (skipping) continue;
        int n = snprintf(out + at, len - at, "%s%s", at ? " " : "", w);
        if (n < 0 || (size_t)n >= len - at) rc = -1;
        else at += (size_t)n;
    }
    free(words);
    if (extra && *extra) {
        int n = snprintf(out + at, len - at, "%s%s", at ? " " : "", extra);
        if (n < 0 || (size_t)n >= len - at) rc = -1;
    }
    return rc;
}

// --- files ---

// The file's contents, NUL-terminated (malloc'd), or NULL when it cannot be read. *len (when
// not NULL) is its size, for files that hold NUL bytes.
static inline char *tb_slurp_len(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)(n > 0 ? n : 0) + 1);
    size_t got = n > 0 ? fread(s, 1, (size_t)n, f) : 0;
    s[got] = 0;
    fclose(f);
    if (len) *len = got;
    return s;
}

static inline char *tb_slurp(const char *path) { return tb_slurp_len(path, NULL); }

// Reads at most len - 1 bytes of the file into buf (empty when it cannot be read).
static inline void tb_slurp_into(const char *path, char *buf, size_t len) {
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f) return;
    size_t n = fread(buf, 1, len - 1, f);
    buf[n] = '\0';
    fclose(f);
}

// Writes exactly these bytes (the file is created or truncated). 0, or -1 when any step fails.
static inline int tb_write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = n == 0 || fwrite(data, 1, n, f) == n;
    if (fclose(f) != 0) ok = 0;
    return ok ? 0 : -1;
}

static inline int tb_write_text(const char *path, const char *text) { return tb_write_bytes(path, text, strlen(text)); }

// Whether path names something, following links (tb_exists) or not (tb_lexists: a dangling
// link exists).
static inline int tb_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static inline int tb_lexists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

// "<TB_TEST_TMPDIR>/<pid>-<name>" with name printf-style: a scratch path of this test process.
static inline const char *tb_tmp_path(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline const char *tb_tmp_path(char *buf, size_t len, const char *fmt, ...) {
    int n = snprintf(buf, len, "%s/%ld-", TB_TEST_TMPDIR, (long)getpid());
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < len) vsnprintf(buf + n, len - (size_t)n, fmt, ap);
    va_end(ap);
    return buf;
}

// The parsed JSON file (json_decref it), or NULL after printing where it does not parse.
static inline json_t *tb_load_json(const char *path) {
    json_error_t e;
    json_t *j = json_load_file(path, 0, &e);
    if (!j) printf("    %s: %s (line %d)\n", path, e.text, e.line);
    return j;
}

// --- text ---

// Lines of s: 0 for "", else one more than its newlines ("a\nb" and "a\nb\n"... count the last).
static inline int tb_count_lines(const char *s) {
    if (!*s) return 0;
    int n = 1;
    for (; *s; s++) n += *s == '\n';
    return n;
}

// The 1-based line of the first line of file path holding marker (-1: no such line, or the
// file cannot be read). With needle, *col gets the 1-based column of needle on that line (-1
// when it is not there).
static inline int tb_locate(const char *path, const char *marker, const char *needle, int *col) {
    char *s = tb_slurp(path);
    if (col) *col = -1;
    if (!s) return -1;
    char *hit = strstr(s, marker);
    int line = -1;
    if (hit) {
        line = 1;
        char *bol = s;
        for (char *p = s; p < hit; p++)
            if (*p == '\n') {
                line++;
                bol = p + 1;
            }
        if (needle && col) {
            char *eol = strchr(bol, '\n');
            char *n = strstr(bol, needle);
            if (n && (!eol || n < eol)) *col = (int)(n - bol) + 1;
        }
    }
    free(s);
    return line;
}

static inline int tb_line_of(const char *path, const char *marker) { return tb_locate(path, marker, NULL, NULL); }

// Whether text (NULL: nothing) holds needle. Not inlined, so the compiler does not take the
// NULL case for a hint that text, printed after a failed check, may be NULL.
__attribute__((noinline, unused)) static int tb_has(const char *text, const char *needle) {
    return text && strstr(text, needle) != NULL;
}

// --- commands ---

// What a command printed and how long it took.
typedef struct tb_output {
    char *out;  // stdout (with tb_run_merged: stdout and stderr interleaved), NUL-terminated
    char *err;  // stderr ("" with tb_run_merged)
    double seconds;  // wall time
} tb_output;

static inline void tb_output_free(tb_output *o) {
    free(o->out);
    free(o->err);
    o->out = o->err = NULL;
}

// The exit status as a shell reports it: the code, or 128 + the signal that ended it.
static inline int tb_exit_status(int st) {
    if (st == -1) return 128;
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    return 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

// Runs `sh -c "cd DIR && ( CMD )"` (no cd when dir is NULL). With o, stdout goes to o->out and
// stderr to o->err (or with it into o->out when merged), each run replacing what o held; with
// o NULL the output goes wherever CMD sends it. Returns tb_exit_status.
static inline int tb_vrun(tb_output *o, int merged, const char *dir, const char *fmt, va_list ap) {
    char cmd[8192], cd[1100] = "", out_path[512], err_path[512], full[8192 + 1100 + 2 * 512 + 64];
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    if (dir) snprintf(cd, sizeof cd, "cd '%s' && ", dir);
    snprintf(out_path, sizeof out_path, "%s/%ld.stdout", TB_TEST_TMPDIR, (long)getpid());
    snprintf(err_path, sizeof err_path, "%s/%ld.stderr", TB_TEST_TMPDIR, (long)getpid());
    if (!o)
        snprintf(full, sizeof full, "%s( %s\n)", cd, cmd);
    else if (merged)
        snprintf(full, sizeof full, "%s( %s\n) > '%s' 2>&1", cd, cmd, out_path);
    else
        snprintf(full, sizeof full, "%s( %s\n) > '%s' 2> '%s'", cd, cmd, out_path, err_path);
    fflush(NULL);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int st = system(full);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (o) {
        tb_output_free(o);
        o->seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        o->out = tb_slurp(out_path);
        o->err = merged ? NULL : tb_slurp(err_path);
        if (!o->out) o->out = calloc(1, 1);
        if (!o->err) o->err = calloc(1, 1);
        remove(out_path);
        remove(err_path);
    }
    return tb_exit_status(st);
}

// The command (printf-style) in dir (NULL: here), stdout and stderr captured apart into *o.
static inline int tb_run(tb_output *o, const char *dir, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static inline int tb_run(tb_output *o, const char *dir, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = tb_vrun(o, 0, dir, fmt, ap);
    va_end(ap);
    return rc;
}

// The same with stdout and stderr interleaved into o->out, as a terminal would show them.
static inline int tb_run_merged(tb_output *o, const char *dir, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline int tb_run_merged(tb_output *o, const char *dir, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = tb_vrun(o, 1, dir, fmt, ap);
    va_end(ap);
    return rc;
}

// tb_run_merged for one command: sets *output (when not NULL) to what it printed (malloc'd,
// never NULL; free it) and returns the exit status.
static inline int tb_shell(char **output, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline int tb_shell(char **output, const char *fmt, ...) {
    tb_output o = {0};
    va_list ap;
    va_start(ap, fmt);
    int rc = tb_vrun(&o, 1, NULL, fmt, ap);
    va_end(ap);
    if (output) *output = o.out, o.out = NULL;
    tb_output_free(&o);
    return rc;
}

// Runs fn(arg, out, len) in a child process that SIGALRM ends after `seconds`, so a call that
// could block forever (opening a FIFO, reading /dev/zero) fails the test instead of hanging
// it. What fn writes into out (a message, NUL-terminated) comes back in out; fn's return value
// is the child's exit status. Returns tb_exit_status of the child: 128 + SIGALRM (142) when it
// ran out of time.
static inline int tb_call_bounded(int (*fn)(void *arg, char *out, size_t len), void *arg, unsigned seconds, char *out,
                                  size_t len) {
    out[0] = '\0';
    int fds[2];
    if (pipe(fds) != 0) return 128;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return 128;
    }
    if (pid == 0) {
        close(fds[0]);
        alarm(seconds);
        char *buf = calloc(1, len);
        int rc = buf ? fn(arg, buf, len) : 127;
        if (buf && write(fds[1], buf, strlen(buf)) < 0) rc = 126;
        _exit(rc);
    }
    close(fds[1]);
    size_t used = 0;
    for (ssize_t n; used + 1 < len && (n = read(fds[0], out + used, len - 1 - used)) > 0;) used += (size_t)n;
    out[used] = '\0';
    close(fds[0]);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return 128;
    return tb_exit_status(st);
}

#endif
