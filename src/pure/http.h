/*-------------------------------------------------------------------------
 *
 * http.h
 *	  The relay's HTTP engine: libcurl's multi interface driven from the
 *	  relay's own wait loop.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRELOUT_HTTP_H
#define GRELOUT_HTTP_H

#include <curl/curl.h>

#include "edge.h"

/* Bytes of a response body kept for last_error, and read at most. */
#define HTTP_BODY_KEEP		256
#define HTTP_BODY_READ_MAX	(64 * 1024)
/* Bytes of HttpRequest.content_type, its NUL included (longer ones are cut). */
#define HTTP_CONTENT_TYPE_MAX	128
/* Bytes of HttpRequest.refused, its NUL included. */
#define HTTP_REFUSED_MAX	160

/*
 * One request.  The caller fills the first group of fields and keeps the
 * struct alive until the engine hands it back as finished; the engine
 * fills the second group.
 */
typedef struct HttpRequest
{
	/* set by the caller */
	const char *url;
	struct curl_slist *headers;
	const char *body;
	size_t		body_len;
	long		timeout_ms;
	/* PEM, NUL-terminated, NULL for none: mutual TLS, a CA of its own */
	const char *tls_client_cert;
	const char *tls_client_key;
	const char *tls_ca;
	int			purpose;		/* the caller's tag: what the request is for */
	char	   *body_keep;		/* NULL, or a buffer for more of the body: */
	size_t		body_keep_size; /* its first body_keep_size - 1 bytes */

	/* set by the engine */
	CURLcode	result;
	long		status;			/* 0 when no response arrived */
	long		os_errno;		/* errno of a failed connect, else 0 */
	bool		body_cut;		/* the body was longer than we read */
	bool		has_retry_after;
	int64_t		retry_after_ms;
	char		body_start[HTTP_BODY_KEEP + 1];
	size_t		body_start_len;
	size_t		body_read;
	size_t		body_keep_len;	/* bytes in body_keep (NUL-terminated) */
	char		content_type[HTTP_CONTENT_TYPE_MAX];	/* the final answer's
														 * Content-Type, raw, or
														 * "" */
	char		refused[HTTP_REFUSED_MAX];	/* why it was refused by policy */
	char		errbuf[CURL_ERROR_SIZE];
	long		http_version;	/* CURL_HTTP_VERSION_* of the answer, or 0 */
	long		new_connections;	/* connections it opened (0: reused one) */
	bool		headers_done;	/* a final answer's headers all came */
	bool		answered_early; /* answered, then its upload failed (http.c) */
	bool		restarted;		/* sent again on a new connection (http.c) */
	struct HttpHandle *handle;	/* the easy handle it runs on */
	struct HttpEngine *engine;
} HttpRequest;

typedef struct HttpEngine HttpEngine;
typedef struct HttpHandle HttpHandle;

extern HttpEngine *http_engine_create(void);
extern void http_engine_configure(HttpEngine *engine, const char *ca_file,
								  bool block_private,
								  const EdgeCidrList *allowed_networks,
								  int max_in_flight);
extern int	http_engine_fd(HttpEngine *engine);
extern long http_engine_timeout(HttpEngine *engine);
extern bool http_engine_start(HttpEngine *engine, HttpRequest *req);
extern void http_engine_perform(HttpEngine *engine);
extern HttpRequest *http_engine_next_done(HttpEngine *engine);
extern int	http_engine_running(HttpEngine *engine);
extern unsigned long http_engine_watch_changes(HttpEngine *engine);
extern unsigned long http_engine_sweeps(HttpEngine *engine);
extern void http_engine_set_idle_limit(HttpEngine *engine, int seconds);
extern void http_request_describe_error(const HttpRequest *req, char *buf, size_t len);

#endif							/* GRELOUT_HTTP_H */
