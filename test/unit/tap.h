/*-------------------------------------------------------------------------
 *
 * tap.h
 *	  A minimal TAP producer for grelout's C unit tests: ok(), is_int(),
 *	  is_str() and done_testing(), printing "ok N - name" lines and
 *	  diagnostics on stdout, as TAP::Harness reads them.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRELOUT_TAP_H
#define GRELOUT_TAP_H

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* A test program need not use every check. */
#define TAP_UNUSED __attribute__((unused))

static int	tap_count = 0;
static int	tap_failed = 0;

/* tap_vok: one test line; returns the condition. */
static int
tap_vok(int cond, const char *fmt, va_list ap)
{
	tap_count++;
	if (!cond)
		tap_failed++;
	printf("%sok %d - ", cond ? "" : "not ", tap_count);
	vprintf(fmt, ap);
	printf("\n");
	fflush(stdout);
	return cond;
}

/* ok: pass when cond is true. */
static TAP_UNUSED int
ok(int cond, const char *fmt,...)
{
	va_list		ap;
	int			r;

	va_start(ap, fmt);
	r = tap_vok(cond, fmt, ap);
	va_end(ap);
	return r;
}

/* is_int: pass when got == expected, with a diagnostic otherwise. */
static TAP_UNUSED int
is_int(long long got, long long expected, const char *fmt,...)
{
	va_list		ap;
	int			r;

	va_start(ap, fmt);
	r = tap_vok(got == expected, fmt, ap);
	va_end(ap);
	if (!r)
		printf("#   got:      %lld\n#   expected: %lld\n", got, expected);
	return r;
}

/* is_str: pass when the NUL-terminated strings are equal. */
static TAP_UNUSED int
is_str(const char *got, const char *expected, const char *fmt,...)
{
	va_list		ap;
	int			r;

	va_start(ap, fmt);
	r = tap_vok(got != NULL && expected != NULL && strcmp(got, expected) == 0,
				fmt, ap);
	va_end(ap);
	if (!r)
		printf("#   got:      '%s'\n#   expected: '%s'\n",
			   got ? got : "(null)", expected ? expected : "(null)");
	return r;
}

/* done_testing: print the plan; the exit status says whether all passed. */
static int
done_testing(void)
{
	printf("1..%d\n", tap_count);
	return tap_failed == 0 ? 0 : 1;
}

#endif							/* GRELOUT_TAP_H */
