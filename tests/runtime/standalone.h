/* standalone.h — just enough of Criterion's macros to run the concurrency
 * suite (tests/runtime/t_concurrency.c) from a plain main(), for the ThreadSanitizer
 * build: Criterion itself cannot start under TSan (its inheritable arena
 * fails to map; Snaipe/Criterion issue 274). Messages are the failed
 * condition's text. */
#ifndef HEED_TEST_STANDALONE_H
#define HEED_TEST_STANDALONE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name;
    void (*fn)(void);
} sa_test;

static sa_test sa_tests[64];
static int sa_count, sa_failures;

static void sa_check(int ok, int fatal, const char *file, int line, const char *what)
{
    if (ok) return;
    fprintf(stderr, "%s:%d: failed: %s\n", file, line, what);
    sa_failures++;
    if (fatal) exit(1);
}

#define SA_FIRST(x, ...) (x)
#define Test(suite, name, ...)                                                                        \
    static void suite##_##name(void);                                                                 \
    __attribute__((constructor)) static void sa_register_##suite##_##name(void)                       \
    {                                                                                                 \
        if (sa_count < 64) sa_tests[sa_count++] = (sa_test){ #suite "::" #name, suite##_##name };      \
    }                                                                                                 \
    static void suite##_##name(void)
#define cr_assert(...) sa_check(!!SA_FIRST(__VA_ARGS__, 0), 1, __FILE__, __LINE__, #__VA_ARGS__)
#define cr_expect(...) sa_check(!!SA_FIRST(__VA_ARGS__, 0), 0, __FILE__, __LINE__, #__VA_ARGS__)
#define cr_assert_eq(a, ...) cr_assert((a) == SA_FIRST(__VA_ARGS__, 0), #a)
#define cr_expect_eq(a, ...) cr_expect((a) == SA_FIRST(__VA_ARGS__, 0), #a)
#define cr_assert_str_eq(a, ...) cr_assert(strcmp((a), SA_FIRST(__VA_ARGS__, 0)) == 0, #a)
#define cr_assert_fail(...) cr_assert(0, __VA_ARGS__)
#define cr_skip_test(...)                                                                             \
    do {                                                                                              \
        fprintf(stderr, "skipped: " __VA_ARGS__);                                                     \
        fputc('\n', stderr);                                                                          \
        return;                                                                                       \
    } while (0)

/* Runs every registered test (after each, sa_between), in registration order. */
static void sa_between(void);
int main(void)
{
    for (int i = 0; i < sa_count; i++) {
        int before = sa_failures;
        fprintf(stderr, "[RUN ] %s\n", sa_tests[i].name);
        sa_tests[i].fn();
        sa_between();
        fprintf(stderr, "[%s] %s\n", sa_failures == before ? "PASS" : "FAIL", sa_tests[i].name);
    }
    fprintf(stderr, "standalone: %d tests, %d failed checks\n", sa_count, sa_failures);
    return sa_failures != 0;
}

#endif
