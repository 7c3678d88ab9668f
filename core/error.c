#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int tb_fail(tb_error *err, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}

int tb_fail_prefix(tb_error *err, const char *fmt, ...) {
    if (err) {
        char rest[sizeof err->msg];
        memcpy(rest, err->msg, sizeof rest);
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        // "prefix: rest", cut at the buffer's end if it must be
        size_t used = n < 0 ? 0 : (size_t)n < sizeof err->msg ? (size_t)n : sizeof err->msg - 1;
        size_t room = sizeof err->msg - used;
        if (room > 2) {
            memcpy(err->msg + used, ": ", 2);
            used += 2;
            room -= 2;
            size_t len = strnlen(rest, sizeof rest);
            if (len >= room) len = room - 1;
            memcpy(err->msg + used, rest, len);
            err->msg[used + len] = '\0';
        }
    }
    return -1;
}
