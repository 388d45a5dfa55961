/* tests/unit/unit.h -- minimal assertion helpers for the C unit tests (plain programs). */
#ifndef MOE_TESTS_UNIT_H
#define MOE_TESTS_UNIT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int unit_failures;
static int unit_checks;

/* Record a failed check with its location; the test keeps going so one run shows every
 * failure. */
#define CHECK(cond)                                                                           \
    do {                                                                                      \
        unit_checks++;                                                                        \
        if (!(cond)) {                                                                        \
            unit_failures++;                                                                  \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);          \
        }                                                                                     \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                                    \
    do {                                                                                      \
        long long va_ = (long long)(a), vb_ = (long long)(b);                                 \
        unit_checks++;                                                                        \
        if (va_ != vb_) {                                                                     \
            unit_failures++;                                                                  \
            fprintf(stderr, "%s:%d: %s == %lld, expected %s == %lld\n", __FILE__, __LINE__,   \
                    #a, va_, #b, vb_);                                                        \
        }                                                                                     \
    } while (0)

#define CHECK_STR(a, b)                                                                       \
    do {                                                                                      \
        const char *sa_ = (a), *sb_ = (b);                                                    \
        unit_checks++;                                                                        \
        if (!sa_ || !sb_ || strcmp(sa_, sb_) != 0) {                                          \
            unit_failures++;                                                                  \
            fprintf(stderr, "%s:%d: %s == \"%s\", expected \"%s\"\n", __FILE__, __LINE__, #a, \
                    sa_ ? sa_ : "(null)", sb_ ? sb_ : "(null)");                              \
        }                                                                                     \
    } while (0)

/* Print the summary and return the exit status for main(). */
static inline int unit_done(const char *name)
{
    printf("%s: %d checks, %d failed\n", name, unit_checks, unit_failures);
    return unit_failures ? 1 : 0;
}

#endif
