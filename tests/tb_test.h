// tb_test.h — the test harness: named checks, a summary line ctest shows, exit status.
//
//   TB_TEST(name) { ... TB_CHECK(cond, "fmt", ...); ... }
//   int main(void) { TB_RUN(name); ...; return tb_test_summary(); }
//
// A failing TB_CHECK prints file:line, the condition and the message, marks the current
// test failed and goes on, so one run shows every broken property. The closing line reads
// "N passed, N failed" (tests, not checks).
#ifndef TB_TEST_H
#define TB_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int tb_test_passed, tb_test_failed, tb_test_current_failed;
static const char *tb_test_current;

#define TB_TEST(name) static void name(void)

#define TB_RUN(name)                                                                    \
    do {                                                                                \
        tb_test_current = #name;                                                        \
        tb_test_current_failed = 0;                                                     \
        name();                                                                         \
        if (tb_test_current_failed) {                                                   \
            tb_test_failed++;                                                           \
            printf("FAIL %s\n", #name);                                                 \
        } else {                                                                        \
            tb_test_passed++;                                                           \
            printf("ok   %s\n", #name);                                                 \
        }                                                                               \
        fflush(stdout);                                                                 \
    } while (0)

#define TB_CHECK(cond, ...)                                                             \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            printf("  %s:%d: %s: check failed: %s\n    ", __FILE__, __LINE__,           \
                   tb_test_current, #cond);                                             \
            printf(__VA_ARGS__);                                                        \
            printf("\n");                                                               \
            tb_test_current_failed = 1;                                                 \
        }                                                                               \
    } while (0)

// Stops the current test (for checks later ones depend on).
// `cond` is evaluated once.
#define TB_REQUIRE(cond, ...)                                                           \
    do {                                                                                \
        int tb_require_ok_ = (cond) ? 1 : 0;                                            \
        TB_CHECK(tb_require_ok_, __VA_ARGS__);                                          \
        if (!tb_require_ok_) return;                                                    \
    } while (0)

static inline int tb_test_summary(void) {
    printf("%d passed, %d failed\n", tb_test_passed, tb_test_failed);
    return tb_test_failed ? 1 : 0;
}

#endif
