/*-------------------------------------------------------------------------
 *
 * otlp.h
 *	  The span of a delivery attempt in OTLP/HTTP JSON, in plain C: its
 *	  encoding (one span's JSON, and the ExportTraceServiceRequest around a
 *	  batch of them), url.full with its secrets redacted, server.address and
 *	  server.port of a URL, and the error.type of a failed attempt.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRELOUT_OTLP_H
#define GRELOUT_OTLP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Bytes of url.full kept, its NUL included (a longer one is cut). */
#define OTLP_URL_MAX		512
/* Bytes of server.address kept, its NUL included. */
#define OTLP_HOST_MAX		256
/* Bytes of error.type, its NUL included. */
#define OTLP_ERROR_TYPE_MAX	32

/*
 * One delivery attempt's span, as otlp_span_json writes it.  Strings are
 * NUL-terminated; a NULL or empty one leaves its attribute out.
 */
typedef struct OtlpSpan
{
	const char *trace_id;		/* 32 lower-case hex digits */
	const char *span_id;		/* 16 */
	const char *parent_span_id; /* 16, or NULL for a root span */
	uint64_t	start_ns;		/* Unix epoch, nanoseconds */
	uint64_t	end_ns;
	const char *url_full;		/* redacted already (otlp_url_full) */
	const char *server_address;
	int			server_port;	/* 0: left out */
	const char *message_id;
	const char *topic;
	const char *handler;
	int			attempt;
	int			status_code;	/* the answer's, 0 when none came */
	const char *error_type;		/* NULL or "": the attempt succeeded */
} OtlpSpan;

extern size_t otlp_span_json(const OtlpSpan *span, char *out, size_t cap);
extern size_t otlp_request_head(const char *version, char *out, size_t cap);
extern const char *otlp_request_tail(void);
extern size_t otlp_url_full(const char *url, size_t len, char *out, size_t cap);
extern bool otlp_server(const char *url, size_t len, char *host, size_t hostcap,
						int *port);
extern void otlp_error_type(bool responded, long status, int curl_result,
							bool refused, char *out);

#endif							/* GRELOUT_OTLP_H */
