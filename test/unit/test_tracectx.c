/*-------------------------------------------------------------------------
 *
 * test_tracectx.c
 *	  Unit tests of src/pure/tracectx.c: which traceparent and tracestate
 *	  values are well formed (W3C Trace Context), the trace context of a
 *	  sqlcommenter comment in a statement (URL-encoded values, escaped
 *	  quotes, comments inside literals not taken), and the traceparent of
 *	  a child span.  Prints TAP.
 *
 *-------------------------------------------------------------------------
 */
#include <stdint.h>
#include <string.h>

#include "tracectx.h"
#include "tap.h"

#define TP	"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

/* tp_ok: tracectx_traceparent_valid on a C string. */
static int
tp_ok(const char *s)
{
	return tracectx_traceparent_valid(s, strlen(s));
}

/* from_sql: tracectx_from_sql on a C string; ctx cleared first. */
static int
from_sql(const char *sql, TraceContext *ctx)
{
	memset(ctx, 0, sizeof(*ctx));
	return tracectx_from_sql(sql, strlen(sql), ctx);
}

int
main(void)
{
	TraceContext ctx;
	char		out[TRACECTX_CHILD_LEN + 1];
	const uint8_t span[8] = {0xde, 0xad, 0xbe, 0xef, 0x01, 0x23, 0x45, 0x67};
	const uint8_t zero[8] = {0};
	char		big[600];

	/* traceparent */
	ok(tp_ok(TP), "a version 00 traceparent is valid");
	ok(tp_ok("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"), "flags 00 are valid");
	ok(!tp_ok("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"), "upper-case hex is invalid");
	ok(!tp_ok("00-00000000000000000000000000000000-00f067aa0ba902b7-01"), "an all-zero trace id is invalid");
	ok(!tp_ok("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"), "an all-zero parent id is invalid");
	ok(!tp_ok("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), "version ff is invalid");
	ok(!tp_ok(TP "-x"), "version 00 with more is invalid");
	ok(!tp_ok("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0"), "a short one is invalid");
	ok(!tp_ok("00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), "a wrong separator is invalid");
	ok(!tp_ok("00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01"), "a non-hex digit is invalid");
	ok(!tp_ok("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0x"), "non-hex flags are invalid");
	ok(tp_ok("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), "a later version of 55 characters is valid");
	ok(tp_ok("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future"), "a later version may go on after a dash");
	ok(!tp_ok("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01future"), "but only after a dash");
	ok(!tracectx_traceparent_valid(NULL, 0), "NULL is invalid");
	ok(!tracectx_traceparent_valid(TP, 54), "a length short of the string is invalid");

	/* tracestate */
	ok(tracectx_tracestate_valid("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE", 39), "a tracestate list is valid");
	ok(!tracectx_tracestate_valid("a=b\tc", 5), "a control character makes it invalid");
	ok(!tracectx_tracestate_valid("", 0), "an empty one is invalid");
	ok(!tracectx_tracestate_valid("   ", 3), "a blank one is invalid");
	memset(big, 'a', sizeof(big));
	ok(tracectx_tracestate_valid(big, 512), "512 characters are valid");
	ok(!tracectx_tracestate_valid(big, 513), "513 are not");
	ok(!tracectx_tracestate_valid("a=\xc3\xa9", 4), "non-ASCII is invalid");

	/* tracectx_set */
	ok(tracectx_set(&ctx, TP, strlen(TP), "a=b", 3), "set takes a valid pair");
	is_str(ctx.traceparent, TP, "with its traceparent");
	is_str(ctx.tracestate, "a=b", "and its tracestate");
	ok(tracectx_set(&ctx, TP, strlen(TP), "a=\x01", 3) && ctx.tracestate[0] == '\0',
	   "an invalid tracestate is dropped");
	ok(!tracectx_set(&ctx, "00-x", 4, "a=b", 3), "an invalid traceparent is refused");

	/* sqlcommenter */
	ok(from_sql("SELECT outbox_publish('t', '{}') /*traceparent='" TP "'*/", &ctx),
	   "a sqlcommenter comment is found");
	is_str(ctx.traceparent, TP, "its traceparent");
	is_str(ctx.tracestate, "", "and no tracestate");
	ok(from_sql("SELECT 1 /*controller='index',traceparent='00-4bf92f3577b34da6a3ce929d0e0e4736"
				"-00f067aa0ba902b7-01',tracestate='congo%3Dt61rcWkgMzE%2Crojo%3D00f067aa0ba902b7'*/", &ctx),
	   "among other keys, with an encoded tracestate");
	is_str(ctx.tracestate, "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7", "the tracestate is URL-decoded");
	ok(from_sql("SELECT 1 /*traceparent='00%2D4bf92f3577b34da6a3ce929d0e0e4736%2D00f067aa0ba902b7%2D01'*/", &ctx),
	   "an encoded traceparent");
	is_str(ctx.traceparent, TP, "is decoded");
	ok(from_sql("SELECT 1 /* tracestate = 'k%3Dit\\'s' , traceparent = '" TP "' */", &ctx),
	   "spaces around keys and values, an escaped quote");
	is_str(ctx.tracestate, "k=it's", "the escaped quote is one quote");
	ok(from_sql("SELECT 1 /*traceparent='" TP "',tracestate='%0A'*/", &ctx) &&
	   ctx.tracestate[0] == '\0', "a tracestate with a control character is dropped");
	ok(!from_sql("SELECT 1 /*traceparent='00-bad'*/", &ctx), "a malformed traceparent is ignored");
	ok(!from_sql("SELECT 1 /*traceparent='%zz'*/", &ctx), "a malformed encoding is ignored");
	ok(!from_sql("SELECT 1 /*traceparent='" TP "' and more*/", &ctx), "a comment that is not a list is not taken");
	ok(!from_sql("SELECT 1 /*traceparent='" TP "'", &ctx), "an unclosed comment is not taken");
	ok(!from_sql("SELECT 1 /*traceparent=" TP "*/", &ctx), "an unquoted value is not taken");
	ok(!from_sql("SELECT 'x /*traceparent=''" TP "''*/'", &ctx), "nor a comment inside a literal");
	ok(!from_sql("SELECT E'\\' /*traceparent=''" TP "''*/'", &ctx), "nor inside an E'' literal");
	ok(!from_sql("SELECT $q$ /*traceparent='" TP "'*/ $q$", &ctx), "nor inside a dollar quote");
	ok(!from_sql("SELECT \"/*traceparent='" TP "'*/\"", &ctx), "nor inside a quoted identifier");
	ok(!from_sql("SELECT 1 -- /*traceparent='" TP "'*/", &ctx), "nor after --");
	ok(from_sql("SELECT $1, a$b /*traceparent='" TP "'*/", &ctx), "a parameter or a $ in a name opens no quote");
	ok(from_sql("/* plain */ SELECT 1 /*traceparent='00-bad'*/ /*traceparent='" TP "'*/", &ctx),
	   "the first comment with a valid traceparent is taken");
	ok(from_sql("SELECT 1 /* outer /* inner */ */ /*traceparent='" TP "'*/", &ctx),
	   "nested comments end where the outer one does");
	ok(!from_sql("", &ctx), "an empty statement has none");
	ok(!tracectx_from_sql(NULL, 0, &ctx), "nor NULL");
	ok(!tracectx_from_sql("SELECT 1 /*traceparent='" TP "'*/", 20, &ctx), "only len bytes are read");

	/* the child's traceparent */
	is_int((long long) tracectx_child(TP, strlen(TP), span, out), TRACECTX_CHILD_LEN, "a child traceparent");
	is_str(out, "00-4bf92f3577b34da6a3ce929d0e0e4736-deadbeef01234567-01",
		   "keeps the trace id and flags, with the new span id");
	is_int((long long) tracectx_child("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03-x", 57, span, out),
		   TRACECTX_CHILD_LEN, "a child of a later version");
	is_str(out, "00-4bf92f3577b34da6a3ce929d0e0e4736-deadbeef01234567-03", "is version 00");
	is_int((long long) tracectx_child(TP, strlen(TP), zero, out), 0, "no child with a zero span id");
	is_int((long long) tracectx_child("00-bad", 6, span, out), 0, "nor of an invalid traceparent");

	return done_testing();
}
