/*-------------------------------------------------------------------------
 *
 * fuzz.h
 *	  Shared bits of grelout's libFuzzer targets: CHECK(), which turns a
 *	  broken invariant into a crash that libFuzzer reports and saves, and
 *	  copy helpers that give each parser a buffer of exactly the input's
 *	  size, so that AddressSanitizer catches any read past it.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRELOUT_FUZZ_H
#define GRELOUT_FUZZ_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond) \
	do { \
		if (!(cond)) \
		{ \
			fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__, __LINE__, #cond); \
			abort(); \
		} \
	} while (0)

/* dup_exact: a malloc'd copy of exactly size bytes (no terminator). */
static inline char *
dup_exact(const uint8_t *data, size_t size)
{
	char	   *p = malloc(size ? size : 1);

	if (size)
		memcpy(p, data, size);
	return p;
}

/* dup_cstring: a malloc'd NUL-terminated copy, cut at the first NUL. */
static inline char *
dup_cstring(const uint8_t *data, size_t size)
{
	char	   *p = malloc(size + 1);

	if (size)
		memcpy(p, data, size);
	p[size] = '\0';
	return p;
}

#endif							/* GRELOUT_FUZZ_H */
