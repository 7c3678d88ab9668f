// error.h — how every part reports failure (docs/ARCHITECTURE.md, "Memory and errors").
//
// Functions that can fail return 0 on success and -1 on failure, and fill a caller-owned
// tb_error with one message that says what failed, where (file and offset, flag, tensor
// name, rule) and the value that was wrong. Nothing prints from deep inside the engine;
// the caller decides whether to print, add context, or exit.
#ifndef TB_CORE_ERROR_H
#define TB_CORE_ERROR_H

#include <stddef.h>

// Exit statuses of pretrain_gpt and tracebook, decided at the top (main) from the error
// that reached it. The two that end the process from below main are documented where
// they happen: out of memory (core/xalloc.h, runtime/memory.h) and a hang (comm/watchdog.h).
enum {
    TB_EXIT_FAILURE = 1,        // an error, reported on stderr
    TB_EXIT_USAGE = 2,          // bad command line
    TB_EXIT_OUT_OF_MEMORY = 3,  // over --memory-cap (oom.json) or out of host memory
    TB_EXIT_HANG = 4,           // a communicator call timed out (hang.json)
};

typedef struct tb_error {
    char msg[2048];
} tb_error;

// Formats the message into err (if err is not NULL) and returns -1, so a failing
// function can end with `return tb_fail(err, "...", ...);`.
int tb_fail(tb_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// Prepends context to an existing message: "context: previous message".
int tb_fail_prefix(tb_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
