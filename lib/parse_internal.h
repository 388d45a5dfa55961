/* parse_internal.h -- locale-free number parsing shared by the text readers (router logs,
 * JSON, placements). Below every part; includes nothing of the library. */
#ifndef MOE_PARSE_INTERNAL_H
#define MOE_PARSE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* Parse a decimal unsigned integer at *p (digits only); advances *p. Returns 0, or -1 if there
 * is no digit or the value exceeds max. Does not look past a non-digit. */
int parse_uint(const char **p, uint64_t max, uint64_t *v);
/* Parse a decimal floating-point number ("-0.25", "1e-3") at *p without locale dependence;
 * advances *p. Returns 0, -1 if there is no number. */
int parse_double(const char **p, double *v);
/* Value of s[0..len) if it is all digits (1 to 10 of them) and fits 32 bits: 0, else -1. */
int parse_u32_digits(const char *s, size_t len, uint32_t *v);
/* A whole string of decimal digits (nothing before or after) of value at most max: 0, else -1. */
int parse_whole_uint(const char *s, uint64_t max, uint64_t *v);
/* Split line at tabs in place into f[0..max); returns the field count (the last field keeps
 * the rest of the line when there are more than max). */
size_t parse_split_tabs(char *line, char **f, size_t max);

#endif
