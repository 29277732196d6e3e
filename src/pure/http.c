/*-------------------------------------------------------------------------
 *
 * http.c
 *	  The relay's HTTP engine: many POST requests in flight at once over
 *	  libcurl's multi interface, driven by the relay's wait loop.
 *
 * libcurl tells us which sockets it wants watched; we keep them in an
 * epoll set of our own, whose single descriptor the relay adds to its
 * PostgreSQL WaitEventSet next to its latch.  One wait thus covers the
 * latch, postmaster death, every socket and (through the wait's timeout)
 * libcurl's timers, and a signal is answered at once while requests are in
 * flight.  Connections are reused across requests by the multi handle.
 *
 * A socket libcurl stops watching (its connection went back to the cache)
 * stays in the epoll set, as it was: its next request, on the same
 * connection, usually wants what it had, so a kept-alive connection costs
 * no epoll_ctl a request instead of two, an ADD and a DEL (their measured
 * cost: bench/README, "Figures behind the code").  If such a socket turns
 * ready while nothing wants it (the peer closed the idle connection), it
 * is taken out then.  Only sockets this file opens and closes (opensocket_cb,
 * closesocket_cb) are kept so, since only for them is it known when the
 * descriptor is closed and its number may come back as another socket,
 * and the multi handle's own wakeup descriptor, which lives as long as the
 * multi handle: libcurl 8.20 and later watch it through their internal
 * "admin" handle (an easy handle that is none of ours, CURLINFO_PRIVATE
 * unset) while any transfer is alive and stop when none is, which cost an
 * ADD and a DEL a request one after another.  Any other socket libcurl
 * watches is taken out as soon as it says so.
 *
 * Easy handles are reused too: one per request slot, made the first time
 * that many requests are in flight at once.  The options every request
 * shares (policy, callbacks) are set when a handle is made; starting a
 * request sets only what is its own (URL, body, headers, timeout, and the
 * request its callbacks fill), all of it every time, so nothing of one
 * request reaches the next.  A change of the engine's settings retires
 * every handle made before it.  Under a libcurl older than 8.1.0 a handle
 * serves one request, and under any libcurl an HTTP/1 connection left with
 * unread input is not reused: see "libcurl before 8.1.0" below.
 *
 * Connections are pooled per origin (scheme, host, port) by the multi
 * handle, whichever handler's request opened them, but for the requests
 * with a client certificate or a CA of their own: each such TLS identity
 * has a pool of its own, in its share (tls_share_for), freed when the
 * identity has been quiet for the idle limit (identities_prune).  The
 * pool is sized to the relay's bound on requests in flight
 * (http_engine_configure's max_in_flight), so that an origin's
 * connections are not closed while others are busy.  Over https every
 * request offers HTTP/2 by ALPN and takes HTTP/1.1 where the server offers
 * only that; HTTP/2 requests to an origin are multiplexed on one
 * connection (up to 100 streams), and a request to an origin not known to
 * speak HTTP/1 only waits for the connection already being set up to it
 * (CURLOPT_PIPEWAIT) rather than opening one of its own.  The engine remembers the https origins that
 * answered over HTTP/1.1 (origin_h1) so that their requests do not wait.
 * TLS sessions (and resolved names) are kept in a share all handles use,
 * so that a new connection to an origin resumes its TLS session; a new
 * CA file brings a new share, the old one freed once no handle uses it
 * (HttpShare).  An idle connection is not reused after IDLE_CONN_MAX_S
 * (below the idle timeouts of common load balancers, which would
 * otherwise close it just as a request is sent on it) and no connection
 * is used for new requests after CONN_LIFETIME_S (a name's new addresses
 * and a load balancer's other backends get used).  A connection libcurl
 * frees without a TLS close leaves its session resumable (tls_ex_free).
 * An HTTP/2 answer that came whole before the server read the request's
 * body counts as the answer, though libcurl 7.88 reports the transfer
 * failed (answered_early).
 *
 * While requests are in flight, every transfer is run once a second
 * (SWEEP_EVERY_MS), whether or not its socket or timer asked for it.
 * libcurl 8.23 (Debian sid, the PostgreSQL 18 root) sometimes leaves a
 * burst of HTTP/2 requests put on one connection unsent: the trace shows
 * their uploads "completely sent off", then libcurl asks for nothing but
 * input on that socket, the server never sees them, and they end in their
 * timeout (10 s by default) to be retried (bench/README.md, "HTTP/2
 * stalls").  libcurl's own curl_multi_perform moves them along; event
 * driven, nothing does.  The sweep (curl_multi_socket_all: every transfer
 * run, every socket's wishes asked again) bounds such a stall to about a
 * second, at the cost of one pass over the transfers in flight a second.
 *
 * Policy enforced here on every request: only http and https, no
 * redirects, TLS verification on, an optional CA bundle, no proxy from the
 * environment, a bounded read of the response body, and (when asked) no
 * connection to loopback, private, link-local, multicast or unspecified
 * addresses, checked on the resolved address at connect time.
 *
 * libcurl before 8.1.0 (Debian 12 has 7.88.1; decided at run time, as
 * libcurl may be upgraded under a built module) has two bugs that any
 * endpoint can trigger through handle and connection reuse, both found by
 * fuzz/http_engine.c:
 *
 * 1. curl issue 11101 (fixed in 8.1.0 by pull request 11103): an easy
 *	  handle keeps a pointer to the last response header it stored
 *	  (state.prevhead) and does not clear it when its next transfer starts
 *	  and frees the stored headers.  If that next response's first header
 *	  line is folded (starts with a space or a tab), libcurl appends it to
 *	  the freed header: a use after free and a realloc of freed memory.
 *	  The pointer is set by any stored header (every HTTP/1 header line but
 *	  the status line, and HTTP/2's ":status"), so it dangles on every handle
 *	  that has had an answer, and only a handle that never stored a header
 *	  is safe to start a transfer on.  A narrower rule (free only after a
 *	  folded header) cannot work: the fold that does the damage is in the
 *	  response to the next request, which is not known when the handle is
 *	  taken.  So here a handle serves one request (handle_put frees it, and
 *	  the resend of restart_fresh goes out on a new one): there is no API
 *	  that clears the pointer (curl_easy_reset does not).  The cost is a
 *	  curl_easy_init and the shared options a request (bench/README).
 *
 * 2. curl pull request 10690 (in 8.0.0): libcurl puts a connection back in
 *	  its cache, and reuses it, with input still waiting on it.  On HTTP/1
 *	  it reads a response with a known length only to its end, and stops
 *	  after the headers of one without a body (204, 304), so whatever the
 *	  endpoint wrote beyond its response stays in the socket, and so does
 *	  what it writes while the connection is idle; the next request on the
 *	  connection, possibly another handler's to the same origin, reads that
 *	  as its own response ("Received HTTP/0.9", or a response the endpoint
 *	  wrote ahead).  No response tells beforehand that bytes will follow
 *	  it, so no option set per request (CURLOPT_FORBID_REUSE) can be
 *	  narrower than all of them.  libcurl 8.0's fix is to take a cached
 *	  connection with input waiting for dead; this file does the same from
 *	  outside: when an HTTP/1 transfer gives up its socket (socket_cb's
 *	  CURL_POLL_REMOVE, which libcurl makes before it runs any other
 *	  transfer, one waiting for that connection included) the socket is
 *	  peeked (input_waiting), and so is a kept socket that turns ready
 *	  while idle (kept_ready, before http_engine_perform runs any
 *	  transfer).  Input waiting means the connection must not be reused:
 *	  its descriptor is replaced by a socket whose peer is closed
 *	  (conn_spoil), which libcurl's own check before a reuse finds dead,
 *	  so it closes the connection and opens a new one.  Connections with
 *	  nothing waiting, every healthy endpoint's, are reused as before, at
 *	  the cost of one recv a request.  HTTP/2 connections (framed, checked
 *	  by libcurl itself) are left alone, known by their ALPN, not by the
 *	  version libcurl reports (which an HTTP/1 endpoint sets with a status
 *	  line "HTTP/2 200").  As with libcurl's fix, input that arrives
 *	  between that check and the next request's read is not seen, and
 *	  neither is what OpenSSL has already read into its buffer of a TLS
 *	  record.  The check is made under every libcurl, not only before 8.1.0:
 *	  8.14 and 8.23 (Debian's trixie and sid, the PostgreSQL 17 to 19 test
 *	  roots) still reuse an idle HTTP/1 connection on which the endpoint
 *	  wrote an answer ahead (test_http's check), whatever 8.0's fix covers.
 *
 * Uses libcurl, OpenSSL (only where libcurl uses the same) and the C
 * library.
 *
 *-------------------------------------------------------------------------
 */
#include "http.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <openssl/crypto.h>
#include <openssl/ssl.h>

/* the pool's size: the requests that may be in flight, and at least this */
#define POOL_MIN			64
/* HTTP/2 streams on one connection before another is opened */
#define MAX_STREAMS			100
/* seconds an idle connection may be reused, and a connection used at all */
#define IDLE_CONN_MAX_S		50
#define CONN_LIFETIME_S		300
/* the first libcurl without the bugs of the file header's last section */
#define CURL_FIXED_VERSION	0x080100
/* https origins remembered as speaking HTTP/1 only */
#define ORIGIN_H1_MAX		64
#define ORIGIN_MAX_LEN		256

/* ms between two runs of every transfer in flight (file header) */
#define SWEEP_EVERY_MS		1000

/* client TLS identities with a connection pool of their own (tls_share_for) */
#define TLS_SHARES_MAX		32

/*
 * The TLS session and DNS cache of the handles made under one setting of
 * the engine, or of the handles of one client TLS identity, which also
 * hold their connection pool (tls_share_for).  refs counts the handles
 * attached to it; a share retired (replaced by a new one, or evicted) is
 * freed when its last handle is.
 */
typedef struct HttpShare
{
	CURLSH	   *sh;
	int			refs;
	bool		retired;
	/* an identity's share: what its requests set (set_request_tls) */
	char	   *cert;
	char	   *key;
	char	   *ca;
	uint64_t	used;			/* the engine's tls_clock when last taken */
	int64_t		used_ms;		/* monotonic ms when last taken */
} HttpShare;

struct HttpEngine
{
	CURLM	   *multi;
	int			epfd;
	int64_t		timer_deadline; /* monotonic ms; -1 when none */
	int			running;
	int64_t		sweep_at;		/* monotonic ms of the next sweep (file
								 * header); -1 while nothing is in flight */
	unsigned long sweeps;		/* sweeps made (for the tests) */
	char	   *ca_file;
	bool		block_private;
	EdgeCidrList allowed;		/* a copy of grelout.allowed_networks */

	/* easy handles kept for the next requests (see handle_take) */
	HttpHandle **idle;
	int			nidle;
	int			idle_cap;
	unsigned	settings;		/* bumped by every http_engine_configure */
	HttpShare  *share;			/* for handles made now; NULL if none */
	HttpShare  *tls_shares[TLS_SHARES_MAX];	/* one a client TLS identity */
	int			ntls_shares;
	uint64_t	tls_clock;
	int64_t		prune_at;		/* monotonic ms of the next identities_prune */
	int			idle_max_s;		/* IDLE_CONN_MAX_S but in the tests */
	long		max_connects;	/* the pool's size (CURLMOPT_MAXCONNECTS) */
	bool		old_curl;		/* libcurl before 8.1.0 (file header) */

	/* https origins that answered over HTTP/1 (oldest first) */
	char		origin_h1[ORIGIN_H1_MAX][ORIGIN_MAX_LEN];
	int			norigin_h1;

	/* per descriptor: WATCH_* bits (see socket_cb) */
	unsigned char *watch;
	int			nwatch;
	unsigned long watch_changes;	/* epoll_ctl calls made */
};

/*
 * What the engine knows of a descriptor.  WATCH_IN and WATCH_OUT are the
 * events it is in the epoll set for (neither: not in the set); WATCH_OURS
 * says opensocket_cb made it (so closesocket_cb closes it); WATCH_KEPT says
 * libcurl stopped watching it and it stays in the set until it is wanted
 * again, turns ready or is closed.
 */
#define WATCH_IN	0x01
#define WATCH_OUT	0x02
#define WATCH_OURS	0x04
#define WATCH_KEPT	0x08
#define WATCH_MULTI	0x10		/* the multi handle's own (file header) */
#define WATCH_H1	0x20		/* kept after an HTTP/1 transfer (old libcurl) */

/*
 * An easy handle with the shared options set, for one request at a time;
 * made under the engine's settings numbered "settings".
 */
struct HttpHandle
{
	CURL	   *easy;
	unsigned	settings;
	HttpShare  *share;			/* the share it is attached to, or NULL */
	bool		own_tls;		/* a request set its own TLS (set_request_tls) */
	bool		conn_h2;		/* its request's connection negotiated h2
								 * (known under old libcurl only: header_cb) */
};

static void handle_free(HttpEngine *engine, HttpHandle *h);
static void sweep(HttpEngine *engine);
static void identities_prune(HttpEngine *engine);

/*
 * Keeping TLS sessions resumable (see tls_ctx_cb).  tls_ex_index is the
 * SSL ex_data index whose free callback runs in SSL_free, before OpenSSL
 * looks at how the connection was closed; -1 until made, 0 when this
 * process cannot use it (libcurl does not use the OpenSSL we link).
 */
static int	tls_ex_index = -1;
static char tls_ours;			/* the ex_data value marking our SSLs */

/*
 * tls_ex_free: an SSL libcurl made for one of our connections is being
 * freed.  libcurl 7.88 frees an HTTP/2 connection's SSL without a TLS
 * close (SSL_shutdown; seen when it drops one the server closed, or one
 * idle too long), and OpenSSL then marks the session that connection used
 * unresumable, the very session libcurl keeps for the origin's next
 * connection.  Since TLS
 * 1.1 a connection closed improperly no longer bars resuming its session
 * (RFC 5246, 7.2.1), so the SSL is marked closed here, which leaves the
 * session alone.
 */
static void
tls_ex_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl,
			void *argp)
{
	if (ptr == &tls_ours && parent != NULL)
		SSL_set_shutdown((SSL *) parent, SSL_get_shutdown((SSL *) parent) | SSL_SENT_SHUTDOWN);
}

/* tls_info_cb: a handshake starts on one of our connections: mark its SSL. */
static void
tls_info_cb(const SSL *ssl, int where, int ret)
{
	if ((where & SSL_CB_HANDSHAKE_START) && tls_ex_index > 0)
		SSL_set_ex_data((SSL *) ssl, tls_ex_index, &tls_ours);
}

/*
 * tls_ctx_cb: libcurl set up the SSL_CTX of a new connection
 * (CURLOPT_SSL_CTX_FUNCTION): follow its handshakes (tls_info_cb).
 */
static CURLcode
tls_ctx_cb(CURL *easy, void *ctx, void *userp)
{
	SSL_CTX_set_info_callback((SSL_CTX *) ctx, tls_info_cb);
	return CURLE_OK;
}

/*
 * tls_hook_usable: may the engine reach into libcurl's TLS objects?  Only
 * when libcurl's TLS library is the OpenSSL this process links (the same
 * version string), and once the ex_data index is made.
 */
static bool
tls_hook_usable(void)
{
	if (tls_ex_index < 0)
	{
		const curl_version_info_data *info = curl_version_info(CURLVERSION_NOW);
		char		ours[64];

		snprintf(ours, sizeof(ours), "OpenSSL/%s", OpenSSL_version(OPENSSL_VERSION_STRING));
		tls_ex_index = 0;
		if (info->ssl_version && strcmp(info->ssl_version, ours) == 0)
		{
			int			idx = SSL_get_ex_new_index(0, NULL, NULL, NULL, tls_ex_free);

			tls_ex_index = idx > 0 ? idx : 0;
		}
	}
	return tls_ex_index > 0;
}

/* now_ms: a monotonic clock in milliseconds. */
static int64_t
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * watch_slot: the WATCH_* bits of descriptor s, growing the table as
 * needed; NULL when out of memory (the caller then acts at once).
 */
static unsigned char *
watch_slot(HttpEngine *engine, curl_socket_t s)
{
	if (s < 0)
		return NULL;
	if (s >= engine->nwatch)
	{
		int			n = engine->nwatch ? engine->nwatch : 64;
		unsigned char *w;

		while (n <= s)
			n *= 2;
		w = realloc(engine->watch, n);
		if (w == NULL)
			return NULL;
		memset(w + engine->nwatch, 0, n - engine->nwatch);
		engine->watch = w;
		engine->nwatch = n;
	}
	return &engine->watch[s];
}

/* watch_ctl: one change to the epoll set, counted. */
static int
watch_ctl(HttpEngine *engine, int op, curl_socket_t s, unsigned events)
{
	struct epoll_event ev;

	memset(&ev, 0, sizeof(ev));
	ev.events = events;
	ev.data.fd = s;
	engine->watch_changes++;
	return epoll_ctl(engine->epfd, op, s, op == EPOLL_CTL_DEL ? NULL : &ev);
}

/*
 * transfer_maybe_h1: is easy one of our handles, whose request's
 * connection may be HTTP/1 (the only protocol whose connections can be
 * left with a response's leftovers)?  Only a connection that negotiated
 * h2 by ALPN is known not to be (header_cb): the HTTP version libcurl
 * reports is no proof, since libcurl before 8.0 takes an HTTP/1
 * endpoint's "HTTP/2 200" status line at its word.
 */
static bool
transfer_maybe_h1(CURL *easy)
{
	HttpRequest *req = NULL;

	return curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **) &req) == CURLE_OK &&
		req != NULL && req->handle != NULL && !req->handle->conn_h2;
}

/*
 * conn_alpn_h2: did the TLS connection easy's transfer runs on negotiate
 * h2 by ALPN?  False when it cannot tell (no TLS, or a TLS library other
 * than the OpenSSL this process links).
 */
static bool
conn_alpn_h2(CURL *easy)
{
	struct curl_tlssessioninfo *tls = NULL;
	const unsigned char *alpn = NULL;
	unsigned int alpn_len = 0;

	if (!tls_hook_usable() ||
		curl_easy_getinfo(easy, CURLINFO_TLS_SSL_PTR, &tls) != CURLE_OK ||
		tls == NULL || tls->backend != CURLSSLBACKEND_OPENSSL || tls->internals == NULL)
		return false;
	SSL_get0_alpn_selected((SSL *) tls->internals, &alpn, &alpn_len);
	return alpn_len == 2 && memcmp(alpn, "h2", 2) == 0;
}

/*
 * input_waiting: has socket s bytes waiting to be read?  A closed peer
 * (nothing but the end of the stream) is not input: libcurl finds such a
 * connection dead itself.
 */
static bool
input_waiting(curl_socket_t s)
{
	char		c;

	return recv(s, &c, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
}

/*
 * conn_spoil: the idle HTTP/1 connection on socket s (one of ours) has
 * input waiting, which libcurl before 8.0 would read as the next
 * request's response (file header, bug 2): make libcurl find it dead.
 * Its descriptor is replaced by one end of a socket pair whose other end
 * is closed, so libcurl's check of a cached connection before it reuses
 * it (a peek that returns the end of the stream) discards it and closes
 * the descriptor through closesocket_cb; the TCP connection is closed by
 * the replacement.  If no socket pair can be made, the connection is shut
 * down instead: the next request on it then fails to send and is sent
 * again on a new connection (stale_connection).
 */
static void
conn_spoil(HttpEngine *engine, curl_socket_t s)
{
	unsigned char *w = watch_slot(engine, s);
	int			sv[2];

	if (w == NULL || (*w & (WATCH_IN | WATCH_OUT)))
		watch_ctl(engine, EPOLL_CTL_DEL, s, 0);
	if (w)
		*w &= WATCH_OURS;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0)
	{
		shutdown(s, SHUT_RDWR);
		return;
	}
	close(sv[1]);
	if (dup2(sv[0], s) == s)
		fcntl(s, F_SETFD, FD_CLOEXEC);
	else
		shutdown(s, SHUT_RDWR);
	close(sv[0]);
}

/*
 * socket_cb: libcurl asks us to watch a socket for reading and/or writing,
 * or to stop watching it.  A socket of ours that it stops watching stays
 * in the epoll set, marked kept (see the file header); the set changes
 * only when the events wanted do.  An HTTP/1
 * transfer's socket that it stops watching with input waiting is spoiled
 * instead (conn_spoil), before libcurl can give the connection to another
 * transfer (under every libcurl: see the file header, bug 2).
 */
static int
socket_cb(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp)
{
	HttpEngine *engine = (HttpEngine *) userp;
	unsigned char *w = watch_slot(engine, s);
	unsigned char have = w ? (*w & (WATCH_IN | WATCH_OUT)) : 0;
	unsigned char want = 0;
	unsigned	events = 0;

	if (what == CURL_POLL_REMOVE)
	{
		if (w && (*w & WATCH_OURS) && transfer_maybe_h1(easy))
		{
			if (input_waiting(s))
			{
				conn_spoil(engine, s);
				return 0;
			}
			*w |= WATCH_H1;
		}
		if (w && (*w & (WATCH_OURS | WATCH_MULTI)) && have)
			*w |= WATCH_KEPT;
		else
		{
			watch_ctl(engine, EPOLL_CTL_DEL, s, 0);
			if (w)
				*w &= ~(WATCH_IN | WATCH_OUT | WATCH_KEPT);
		}
		return 0;
	}

	if (what == CURL_POLL_IN || what == CURL_POLL_INOUT)
	{
		want |= WATCH_IN;
		events |= EPOLLIN;
	}
	if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT)
	{
		want |= WATCH_OUT;
		events |= EPOLLOUT;
	}

	if (w == NULL || !have)
	{
		if (watch_ctl(engine, EPOLL_CTL_ADD, s, events) != 0 && errno == EEXIST)
			watch_ctl(engine, EPOLL_CTL_MOD, s, events);
	}
	else if (have != want &&
			 watch_ctl(engine, EPOLL_CTL_MOD, s, events) != 0 && errno == ENOENT)
		watch_ctl(engine, EPOLL_CTL_ADD, s, events);
	if (w)
	{
		unsigned char kind = *w & (WATCH_OURS | WATCH_MULTI);

		if (!kind && !have)
		{
			char	   *private = NULL;

			/*
			 * first watched for a handle of libcurl's own, the multi's:
			 * not one of ours, each of which has its request as private
			 * while in the multi (libcurl refuses getinfo on its own)
			 */
			if (curl_easy_getinfo(easy, CURLINFO_PRIVATE, &private) != CURLE_OK ||
				private == NULL)
				kind = WATCH_MULTI;
		}
		*w = kind | want;
	}
	return 0;
}

/* timer_cb: libcurl wants to be called back after timeout_ms (-1: never). */
static int
timer_cb(CURLM *multi, long timeout_ms, void *userp)
{
	HttpEngine *engine = (HttpEngine *) userp;

	engine->timer_deadline = (timeout_ms < 0) ? -1 : now_ms() + timeout_ms;
	return 0;
}

/*
 * write_cb: keep the first HTTP_BODY_KEEP bytes of the body; stop the
 * transfer once HTTP_BODY_READ_MAX bytes have come, so that a huge or
 * endless response costs neither memory nor time.
 */
static size_t
write_cb(char *data, size_t size, size_t nmemb, void *userp)
{
	HttpRequest *req = (HttpRequest *) userp;
	size_t		n = size * nmemb;

	if (req->body_start_len < HTTP_BODY_KEEP)
	{
		size_t		take = HTTP_BODY_KEEP - req->body_start_len;

		if (take > n)
			take = n;
		memcpy(req->body_start + req->body_start_len, data, take);
		req->body_start_len += take;
		req->body_start[req->body_start_len] = '\0';
	}
	if (req->body_keep && req->body_keep_len + 1 < req->body_keep_size)
	{
		size_t		take = req->body_keep_size - 1 - req->body_keep_len;

		if (take > n)
			take = n;
		memcpy(req->body_keep + req->body_keep_len, data, take);
		req->body_keep_len += take;
		req->body_keep[req->body_keep_len] = '\0';
	}
	req->body_read += n;
	if (req->body_read > HTTP_BODY_READ_MAX)
	{
		req->body_cut = true;
		return 0;				/* abort: CURLE_WRITE_ERROR */
	}
	return n;
}

/*
 * header_cb: follow the status line of each response (a 100 Continue may
 * come first), pick up Retry-After and Content-Type, and note the end of
 * a final response's headers.
 */
static size_t
header_cb(char *line, size_t size, size_t nmemb, void *userp)
{
	HttpRequest *req = (HttpRequest *) userp;
	size_t		n = size * nmemb;
	int			status;
	const char *value;
	size_t		vlen;

	if (edge_status_line(line, n, &status))
	{
		req->status = status;
		req->has_retry_after = false;
		req->headers_done = false;
		req->content_type[0] = '\0';
		/* whether the connection is HTTP/2 (socket_cb) */
		if (n >= 6 && memcmp(line, "HTTP/2", 6) == 0 &&
			req->handle != NULL)
			req->handle->conn_h2 = conn_alpn_h2(req->handle->easy);
	}
	else if ((n == 2 && line[0] == '\r' && line[1] == '\n') || (n == 1 && line[0] == '\n'))
		req->headers_done = req->status >= 200;
	else if (edge_header_line(line, n, "retry-after", &value, &vlen))
	{
		int64_t		delay;

		if (edge_retry_after(value, vlen, time(NULL), &delay))
		{
			req->has_retry_after = true;
			req->retry_after_ms = delay;
		}
	}
	else if (edge_header_line(line, n, "content-type", &value, &vlen))
	{
		if (vlen > HTTP_CONTENT_TYPE_MAX - 1)
			vlen = HTTP_CONTENT_TYPE_MAX - 1;
		memcpy(req->content_type, value, vlen);
		req->content_type[vlen] = '\0';
	}
	return n;
}

/*
 * address_refused: under grelout.block_private_networks, is this address
 * off limits?  When it is, req->refused says why.
 */
static bool
address_refused(HttpRequest *req, const struct sockaddr *sa)
{
	HttpEngine *engine = req->engine;
	EdgeAddrClass cls;

	if (engine->block_private)
	{
		cls = edge_addr_class(sa);
		if (cls != EDGE_ADDR_PUBLIC)
		{
			bool		allowed = false;

			for (int i = 0; i < engine->allowed.n && !allowed; i++)
				allowed = edge_cidr_contains(&engine->allowed.cidrs[i], sa);
			if (!allowed)
			{
				char		host[INET6_ADDRSTRLEN] = "?";

				if (sa->sa_family == AF_INET)
					inet_ntop(AF_INET, &((const struct sockaddr_in *) sa)->sin_addr,
							  host, sizeof(host));
				else if (sa->sa_family == AF_INET6)
					inet_ntop(AF_INET6, &((const struct sockaddr_in6 *) sa)->sin6_addr,
							  host, sizeof(host));
				snprintf(req->refused, sizeof(req->refused),
						 "refused to connect to %s address %s (grelout.block_private_networks is on)",
						 edge_addr_class_name(cls), host);
				return true;
			}
		}
	}
	return false;
}

/*
 * opensocket_cb: called with each address the host resolved to, just
 * before connecting.  Refusing here, after resolution, is what makes the
 * private-network block immune to DNS rebinding.
 */
static curl_socket_t
opensocket_cb(void *clientp, curlsocktype purpose, struct curl_sockaddr *address)
{
	HttpRequest *req = (HttpRequest *) clientp;
	curl_socket_t s;
	unsigned char *w;

	if (address_refused(req, &address->addr))
		return CURL_SOCKET_BAD;
	s = socket(address->family, address->socktype, address->protocol);
	w = watch_slot(req->engine, s);
	if (w)
		*w = WATCH_OURS;		/* a new descriptor: in no set yet */
	return s;
}

/*
 * closesocket_cb: libcurl is done with a socket opensocket_cb made.  It
 * leaves the epoll set before its number can come back as another
 * descriptor.
 */
static int
closesocket_cb(void *clientp, curl_socket_t s)
{
	HttpEngine *engine = (HttpEngine *) clientp;
	unsigned char *w = watch_slot(engine, s);

	if (w == NULL || (*w & (WATCH_IN | WATCH_OUT)))
		watch_ctl(engine, EPOLL_CTL_DEL, s, 0);
	if (w)
		*w = 0;
	return close(s);
}

/*
 * prereq_cb: called once the request has a connection, new or reused,
 * just before it is sent.  A connection kept alive from before
 * grelout.block_private_networks was turned on (or allowed_networks
 * narrowed) never went through opensocket_cb under the new policy, so the
 * peer address is checked again here.
 */
static int
prereq_cb(void *clientp, char *conn_primary_ip, char *conn_local_ip,
		  int conn_primary_port, int conn_local_port)
{
	HttpRequest *req = (HttpRequest *) clientp;
	struct sockaddr_storage ss;

	if (!req->engine->block_private)
		return CURL_PREREQFUNC_OK;
	memset(&ss, 0, sizeof(ss));
	if (conn_primary_ip &&
		inet_pton(AF_INET, conn_primary_ip, &((struct sockaddr_in *) &ss)->sin_addr) == 1)
		ss.ss_family = AF_INET;
	else if (conn_primary_ip &&
			 inet_pton(AF_INET6, conn_primary_ip, &((struct sockaddr_in6 *) &ss)->sin6_addr) == 1)
		ss.ss_family = AF_INET6;
	else
		ss.ss_family = AF_UNSPEC;	/* unknown: never public */
	return address_refused(req, (struct sockaddr *) &ss) ?
		CURL_PREREQFUNC_ABORT : CURL_PREREQFUNC_OK;
}

/* http_engine_create: a multi handle and its epoll set; NULL on failure. */
HttpEngine *
http_engine_create(void)
{
	HttpEngine *engine = calloc(1, sizeof(HttpEngine));

	if (engine == NULL)
		return NULL;
	engine->timer_deadline = -1;
	engine->sweep_at = -1;
	engine->idle_max_s = IDLE_CONN_MAX_S;
	engine->old_curl = curl_version_info(CURLVERSION_NOW)->version_num < CURL_FIXED_VERSION;
	engine->epfd = epoll_create1(EPOLL_CLOEXEC);
	engine->multi = curl_multi_init();
	if (engine->epfd < 0 || engine->multi == NULL)
	{
		if (engine->epfd >= 0)
			close(engine->epfd);
		if (engine->multi)
			curl_multi_cleanup(engine->multi);
		free(engine);
		return NULL;
	}
	curl_multi_setopt(engine->multi, CURLMOPT_SOCKETFUNCTION, socket_cb);
	curl_multi_setopt(engine->multi, CURLMOPT_SOCKETDATA, engine);
	curl_multi_setopt(engine->multi, CURLMOPT_TIMERFUNCTION, timer_cb);
	curl_multi_setopt(engine->multi, CURLMOPT_TIMERDATA, engine);
	curl_multi_setopt(engine->multi, CURLMOPT_PIPELINING, (long) CURLPIPE_MULTIPLEX);
	curl_multi_setopt(engine->multi, CURLMOPT_MAX_CONCURRENT_STREAMS, (long) MAX_STREAMS);
	engine->max_connects = POOL_MIN;
	curl_multi_setopt(engine->multi, CURLMOPT_MAXCONNECTS, engine->max_connects);
	return engine;
}

/*
 * share_new: a share of TLS sessions and resolved names for the handles
 * made from now on, and with conns of connections too (a client TLS
 * identity's, tls_share_for); NULL when libcurl cannot make one (the
 * handles then work without: each resumes only the sessions it made
 * itself, and connections stay in the multi handle's pool).
 */
static HttpShare *
share_new(bool conns)
{
	HttpShare  *share = calloc(1, sizeof(HttpShare));

	if (share == NULL)
		return NULL;
	share->sh = curl_share_init();
	if (share->sh == NULL ||
		curl_share_setopt(share->sh, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION) != CURLSHE_OK ||
		curl_share_setopt(share->sh, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS) != CURLSHE_OK ||
		(conns &&
		 curl_share_setopt(share->sh, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT) != CURLSHE_OK))
	{
		if (share->sh)
			curl_share_cleanup(share->sh);
		free(share);
		return NULL;
	}
	return share;
}

/*
 * share_free: a share no handle uses any more, gone with its TLS
 * sessions and (an identity's) its idle connections, which libcurl closes
 * through closesocket_cb.
 */
static void
share_free(HttpShare *share)
{
	curl_share_cleanup(share->sh);
	free(share->cert);
	free(share->key);
	free(share->ca);
	free(share);
}

/*
 * share_retire: share serves no new handle; it goes now if none uses it,
 * or with its last handle (share_release).
 */
static void
share_retire(HttpShare *share)
{
	if (share == NULL)
		return;
	if (share->refs == 0)
		share_free(share);
	else
		share->retired = true;
}

/*
 * share_release: a handle attached to share is gone; the share goes too
 * when it was the last one and the share is retired.
 */
static void
share_release(HttpShare *share)
{
	if (share == NULL)
		return;
	if (--share->refs == 0 && share->retired)
		share_free(share);
}

/* pem_same: two optional PEM texts are the same (both absent included). */
static bool
pem_same(const char *a, const char *b)
{
	if (a == NULL || b == NULL)
		return a == b;
	return strcmp(a, b) == 0;
}

/* pem_copy: *dst becomes a copy of src (NULL stays NULL); false if no memory. */
static bool
pem_copy(char **dst, const char *src)
{
	*dst = src ? strdup(src) : NULL;
	return src == NULL || *dst != NULL;
}

/*
 * tls_share_for: the share of the handles of req's client TLS identity
 * (its certificate, key and CA bundle), made the first time, with a
 * connection pool of its own.  In the multi handle's one pool, libcurl
 * looks for a connection to reuse among all of an origin's connections,
 * and before 8.x (7.88 in Debian 12) it checks each idle one for life (a
 * poll and a read) before it compares their TLS settings: a request with
 * a client certificate paid that for every idle connection of the
 * origin's other handlers, its own kept last (bench/README, figure 14).
 * Its own pool holds only the connections it can use.  At most
 * TLS_SHARES_MAX identities have one: beyond, the one least recently
 * used with no request in flight is freed (its idle connections closed),
 * and when every one has a request in flight the request uses the
 * engine's share and pool, where libcurl's own matching still keeps
 * identities apart.
 */
static HttpShare *
tls_share_for(HttpEngine *engine, const HttpRequest *req)
{
	HttpShare  *victim = NULL;
	HttpShare  *share;
	int			victim_i = -1;
	int			i;

	for (i = 0; i < engine->ntls_shares; i++)
	{
		share = engine->tls_shares[i];
		if (pem_same(share->cert, req->tls_client_cert) &&
			pem_same(share->key, req->tls_client_key) &&
			pem_same(share->ca, req->tls_ca))
		{
			share->used = ++engine->tls_clock;
			share->used_ms = now_ms();
			return share;
		}
		if (share->refs == 0 && (victim == NULL || share->used < victim->used))
		{
			victim = share;
			victim_i = i;
		}
	}
	if (engine->ntls_shares == TLS_SHARES_MAX)
	{
		if (victim == NULL)
			return engine->share;
		share_free(victim);
		engine->tls_shares[victim_i] = engine->tls_shares[--engine->ntls_shares];
	}
	share = share_new(true);
	if (share == NULL)
		return engine->share;
	if (!pem_copy(&share->cert, req->tls_client_cert) ||
		!pem_copy(&share->key, req->tls_client_key) ||
		!pem_copy(&share->ca, req->tls_ca))
	{
		share_free(share);
		return engine->share;
	}
	share->used = ++engine->tls_clock;
	share->used_ms = now_ms();
	engine->tls_shares[engine->ntls_shares++] = share;
	return share;
}

/*
 * http_engine_configure: the settings that apply to requests started from
 * now on.  allowed_networks is the list grelout.allowed_networks' check
 * hook parsed (NULL for none); the engine keeps a copy of it.
 * max_in_flight is the most requests the caller has in flight at once:
 * the connection pool keeps that many (at least POOL_MIN), where libcurl
 * would keep only four per request in flight now, and so close and open
 * again the connections of origins that are quiet for a moment.  A change
 * of CA file starts a new share of TLS sessions (none made under the old
 * one is resumed); otherwise the share is kept.
 */
void
http_engine_configure(HttpEngine *engine, const char *ca_file,
					  bool block_private, const EdgeCidrList *allowed_networks,
					  int max_in_flight)
{
	HttpShare  *old = engine->share;
	bool		same_ca = (engine->ca_file == NULL) ?
		!(ca_file && ca_file[0]) :
		(ca_file && strcmp(engine->ca_file, ca_file) == 0);

	engine->max_connects = (max_in_flight > POOL_MIN) ? max_in_flight : POOL_MIN;
	curl_multi_setopt(engine->multi, CURLMOPT_MAXCONNECTS, engine->max_connects);
	if (old == NULL || !same_ca)
	{
		/* identities without a CA of their own trusted the old file */
		engine->share = share_new(false);
		share_retire(old);
		while (engine->ntls_shares > 0)
			share_retire(engine->tls_shares[--engine->ntls_shares]);
	}
	free(engine->ca_file);
	engine->ca_file = (ca_file && ca_file[0]) ? strdup(ca_file) : NULL;
	engine->block_private = block_private;
	if (allowed_networks)
		engine->allowed = *allowed_networks;
	else
		engine->allowed.n = 0;

	/* handles in flight are retired when they come back (handle_put) */
	engine->settings++;
	while (engine->nidle > 0)
		handle_free(engine, engine->idle[--engine->nidle]);
}

/* http_engine_fd: the descriptor to wait on for socket activity. */
int
http_engine_fd(HttpEngine *engine)
{
	return engine->epfd;
}

/*
 * http_engine_timeout: ms until libcurl's next timer or the next sweep
 * (file header), whichever comes first; -1 for neither.
 */
long
http_engine_timeout(HttpEngine *engine)
{
	int64_t		deadline = engine->timer_deadline;
	int64_t		left;

	if (engine->sweep_at >= 0 && (deadline < 0 || engine->sweep_at < deadline))
		deadline = engine->sweep_at;
	if (deadline < 0)
		return -1;
	left = deadline - now_ms();
	return left < 0 ? 0 : (long) left;
}

/* handle_free: an easy handle gone for good, and its hold on its share. */
static void
handle_free(HttpEngine *engine, HttpHandle *h)
{
	curl_easy_cleanup(h->easy);
	share_release(h->share);
	free(h);
}

/*
 * handle_new: an easy handle with the options every request shares: the
 * policy of the file header and the callbacks, attached to share (the
 * engine's, or an identity's: tls_share_for).  NULL when out of memory.
 */
static HttpHandle *
handle_new(HttpEngine *engine, HttpShare *share)
{
	HttpHandle *h = malloc(sizeof(HttpHandle));
	CURL	   *easy;

	if (h == NULL)
		return NULL;
	easy = curl_easy_init();
	if (easy == NULL)
	{
		free(h);
		return NULL;
	}
	h->easy = easy;
	h->settings = engine->settings;
	h->share = NULL;
	h->own_tls = false;
	h->conn_h2 = false;
	if (share &&
		curl_easy_setopt(easy, CURLOPT_SHARE, share->sh) == CURLE_OK)
	{
		h->share = share;
		h->share->refs++;
	}
	curl_easy_setopt(easy, CURLOPT_HTTP_VERSION, (long) CURL_HTTP_VERSION_2TLS);
	if (tls_hook_usable())
		curl_easy_setopt(easy, CURLOPT_SSL_CTX_FUNCTION, tls_ctx_cb);
	curl_easy_setopt(easy, CURLOPT_MAXAGE_CONN, (long) engine->idle_max_s);
	curl_easy_setopt(easy, CURLOPT_MAXLIFETIME_CONN, (long) CONN_LIFETIME_S);
	curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(easy, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(easy, CURLOPT_PROXY, "");
	curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(easy, CURLOPT_SSL_VERIFYPEER, 1L);
	curl_easy_setopt(easy, CURLOPT_SSL_VERIFYHOST, 2L);
	if (engine->ca_file)
		curl_easy_setopt(easy, CURLOPT_CAINFO, engine->ca_file);
	curl_easy_setopt(easy, CURLOPT_POST, 1L);
	curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, write_cb);
	curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, header_cb);
	curl_easy_setopt(easy, CURLOPT_OPENSOCKETFUNCTION, opensocket_cb);
	curl_easy_setopt(easy, CURLOPT_CLOSESOCKETFUNCTION, closesocket_cb);
	curl_easy_setopt(easy, CURLOPT_CLOSESOCKETDATA, engine);
	curl_easy_setopt(easy, CURLOPT_PREREQFUNCTION, prereq_cb);
	curl_easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L);
	return h;
}

/*
 * handle_take: an idle handle made under the current settings, or a new
 * one.  NULL when out of memory.
 */
static HttpHandle *
handle_take(HttpEngine *engine)
{
	if (engine->nidle > 0)
		return engine->idle[--engine->nidle];
	return handle_new(engine, engine->share);
}

/*
 * handle_put: a handle whose request is over, kept for the next request
 * unless the settings changed since it was made, or libcurl is older than
 * 8.1.0 (file header, bug 1: a handle that stored a header is not safe to
 * start another transfer on, and every answered request stores one).
 */
static void
handle_put(HttpEngine *engine, HttpHandle *h)
{
	CURL	   *easy = h->easy;

	/* no pointer into the finished request's memory stays behind */
	curl_easy_setopt(easy, CURLOPT_PRIVATE, NULL);
	curl_easy_setopt(easy, CURLOPT_POSTFIELDS, NULL);
	curl_easy_setopt(easy, CURLOPT_HTTPHEADER, NULL);
	curl_easy_setopt(easy, CURLOPT_WRITEDATA, NULL);
	curl_easy_setopt(easy, CURLOPT_HEADERDATA, NULL);
	curl_easy_setopt(easy, CURLOPT_OPENSOCKETDATA, NULL);
	curl_easy_setopt(easy, CURLOPT_PREREQDATA, NULL);
	curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, NULL);
	/* nor is a handle with a handler's own certificate or CA kept */
	if (h->settings != engine->settings || engine->old_curl || h->own_tls)
	{
		handle_free(engine, h);
		return;
	}
	if (engine->nidle == engine->idle_cap)
	{
		int			cap = engine->idle_cap ? engine->idle_cap * 2 : 16;
		HttpHandle **idle = realloc(engine->idle, cap * sizeof(HttpHandle *));

		if (idle == NULL)
		{
			handle_free(engine, h);
			return;
		}
		engine->idle = idle;
		engine->idle_cap = cap;
	}
	engine->idle[engine->nidle++] = h;
}

/*
 * origin_of: the origin of an https URL ("https://host:port" as written in
 * the URL, without any user name and password) into buf; false for any
 * other URL or one too long to keep.
 */
static bool
origin_of(const char *url, char *buf, size_t size)
{
	const char *host;
	size_t		n;

	if (strncasecmp(url, "https://", 8) != 0)
		return false;
	host = url + 8;
	n = strcspn(host, "/?#");
	for (size_t i = n; i > 0; i--)
		if (host[i - 1] == '@')	/* the host follows the last '@' */
		{
			host += i;
			n -= i;
			break;
		}
	if (8 + n >= size)
		return false;
	memcpy(buf, "https://", 8);
	memcpy(buf + 8, host, n);
	buf[8 + n] = '\0';
	return true;
}

/* origin_h1_find: the index of origin among those known as HTTP/1, or -1. */
static int
origin_h1_find(HttpEngine *engine, const char *origin)
{
	for (int i = 0; i < engine->norigin_h1; i++)
		if (strcasecmp(engine->origin_h1[i], origin) == 0)
			return i;
	return -1;
}

/*
 * origin_h1_learn: an https request got its answer over HTTP version
 * "version" (CURL_HTTP_VERSION_*): remember its origin as HTTP/1 (the
 * oldest forgotten when the list is full), or forget it (it offers
 * HTTP/2 now).
 */
static void
origin_h1_learn(HttpEngine *engine, const char *url, long version)
{
	char		origin[ORIGIN_MAX_LEN];
	int			i;

	if (version == 0 || !origin_of(url, origin, sizeof(origin)))
		return;
	i = origin_h1_find(engine, origin);
	if (version >= CURL_HTTP_VERSION_2_0 && i >= 0)
	{
		memmove(engine->origin_h1[i], engine->origin_h1[i + 1],
				(engine->norigin_h1 - i - 1) * ORIGIN_MAX_LEN);
		engine->norigin_h1--;
	}
	else if (version < CURL_HTTP_VERSION_2_0 && i < 0)
	{
		if (engine->norigin_h1 == ORIGIN_H1_MAX)
		{
			memmove(engine->origin_h1[0], engine->origin_h1[1],
					(ORIGIN_H1_MAX - 1) * ORIGIN_MAX_LEN);
			engine->norigin_h1--;
		}
		strcpy(engine->origin_h1[engine->norigin_h1++], origin);
	}
}

/*
 * request_reset: clear what the engine fills in of a request, before it is
 * sent (or sent again).
 */
static void
request_reset(HttpRequest *req)
{
	req->result = CURLE_OK;
	req->status = 0;
	req->os_errno = 0;
	req->body_cut = false;
	req->has_retry_after = false;
	req->retry_after_ms = 0;
	req->body_start[0] = '\0';
	req->body_start_len = 0;
	req->body_read = 0;
	req->body_keep_len = 0;
	if (req->body_keep && req->body_keep_size > 0)
		req->body_keep[0] = '\0';
	req->content_type[0] = '\0';
	req->refused[0] = '\0';
	req->errbuf[0] = '\0';
	req->http_version = 0;
	req->new_connections = 0;
	req->headers_done = false;
	req->answered_early = false;
}

/*
 * pipewait_wanted: should a request to url wait for a connection being
 * set up to its origin, to multiplex on it, rather than open its own?
 * For https origins not known to speak HTTP/1 only.
 */
static bool
pipewait_wanted(HttpEngine *engine, const char *url)
{
	char		origin[ORIGIN_MAX_LEN];

	return origin_of(url, origin, sizeof(origin)) &&
		origin_h1_find(engine, origin) < 0;
}

/*
 * set_request_tls: a request's own TLS: the client certificate and key of
 * mutual TLS, the CA bundle trusted instead of the engine's (the server-wide
 * CA file and libcurl's default directory both left out).  libcurl copies
 * each blob.  The handle is not reused after (handle_put): nothing of one
 * handler's TLS can reach another's request.  Connections and TLS sessions
 * are shared only between requests of the same certificate and CA: the
 * handle is attached to that identity's share (tls_share_for), and
 * libcurl matches both anyway (those of different handlers with the same
 * PEM are the same client to the endpoint).
 */
static void
set_request_tls(HttpHandle *h, const HttpRequest *req)
{
	CURL	   *easy = h->easy;
	struct curl_blob blob;

	if (req->tls_client_cert == NULL && req->tls_ca == NULL)
		return;
	h->own_tls = true;
	blob.flags = CURL_BLOB_COPY;
	if (req->tls_client_cert && req->tls_client_key)
	{
		blob.data = (void *) req->tls_client_cert;
		blob.len = strlen(req->tls_client_cert);
		curl_easy_setopt(easy, CURLOPT_SSLCERT_BLOB, &blob);
		curl_easy_setopt(easy, CURLOPT_SSLCERTTYPE, "PEM");
		blob.data = (void *) req->tls_client_key;
		blob.len = strlen(req->tls_client_key);
		curl_easy_setopt(easy, CURLOPT_SSLKEY_BLOB, &blob);
		curl_easy_setopt(easy, CURLOPT_SSLKEYTYPE, "PEM");
	}
	if (req->tls_ca)
	{
		blob.data = (void *) req->tls_ca;
		blob.len = strlen(req->tls_ca);
		curl_easy_setopt(easy, CURLOPT_CAINFO_BLOB, &blob);
		curl_easy_setopt(easy, CURLOPT_CAINFO, NULL);
		curl_easy_setopt(easy, CURLOPT_CAPATH, NULL);
	}
}

/*
 * handle_arm: set on handle h every option that belongs to request req,
 * the same every time, so that nothing of the handle's previous request
 * is left (but CURLOPT_FRESH_CONNECT, which the caller sets).
 */
static void
handle_arm(HttpEngine *engine, HttpHandle *h, HttpRequest *req)
{
	CURL	   *easy = h->easy;

	req->handle = h;
	h->conn_h2 = false;
	curl_easy_setopt(easy, CURLOPT_PRIVATE, req);
	curl_easy_setopt(easy, CURLOPT_URL, req->url);
	curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) req->body_len);
	curl_easy_setopt(easy, CURLOPT_POSTFIELDS, req->body);
	curl_easy_setopt(easy, CURLOPT_HTTPHEADER, req->headers);
	curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, req->timeout_ms);
	curl_easy_setopt(easy, CURLOPT_WRITEDATA, req);
	curl_easy_setopt(easy, CURLOPT_HEADERDATA, req);
	curl_easy_setopt(easy, CURLOPT_OPENSOCKETDATA, req);
	curl_easy_setopt(easy, CURLOPT_PREREQDATA, req);
	curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, req->errbuf);
	curl_easy_setopt(easy, CURLOPT_PIPEWAIT, pipewait_wanted(engine, req->url) ? 1L : 0L);
	set_request_tls(h, req);
}

/*
 * http_engine_start: begin a request on a free handle.  Every option that
 * belongs to one request is set here, each time, so that nothing of the
 * handle's previous request is left.  Returns false (with req->errbuf
 * set) when libcurl cannot even take it.
 */
bool
http_engine_start(HttpEngine *engine, HttpRequest *req)
{
	HttpHandle *h;
	CURL	   *easy;

	/* a request with its own TLS gets a new handle (handle_put) */
	if (req->tls_client_cert || req->tls_ca)
		h = handle_new(engine, tls_share_for(engine, req));
	else
		h = handle_take(engine);

	request_reset(req);
	req->restarted = false;
	req->handle = h;
	req->engine = engine;
	if (h == NULL)
	{
		snprintf(req->errbuf, sizeof(req->errbuf), "out of memory in libcurl");
		return false;
	}

	easy = h->easy;
	handle_arm(engine, h, req);
	curl_easy_setopt(easy, CURLOPT_FRESH_CONNECT, 0L);

	if (curl_multi_add_handle(engine->multi, easy) != CURLM_OK)
	{
		snprintf(req->errbuf, sizeof(req->errbuf), "libcurl refused the request");
		handle_free(engine, h);
		req->handle = NULL;
		return false;
	}
	engine->running++;
	return true;
}

/*
 * kept_ready: a socket kept while unwanted turned ready: the peer closed
 * the idle connection, or (HTTP/1) wrote something
 * nobody asked for, which spoils the connection (file header, bug 2).
 */
static void
kept_ready(HttpEngine *engine, int fd)
{
	if ((engine->watch[fd] & WATCH_H1) && input_waiting(fd))
	{
		conn_spoil(engine, fd);
		return;
	}
	watch_ctl(engine, EPOLL_CTL_DEL, fd, 0);
	engine->watch[fd] &= WATCH_OURS | WATCH_MULTI;
}

/*
 * http_engine_perform: move every request along as far as it can go
 * without blocking: sockets that are ready, then timers that are due.
 * Kept sockets that turned ready are dealt with first, before libcurl
 * runs any transfer that could reuse their connections.
 */
void
http_engine_perform(HttpEngine *engine)
{
	struct epoll_event events[64];
	int			n;
	int			still;

	while ((n = epoll_wait(engine->epfd, events, 64, 0)) > 0)
	{
		for (int i = 0; i < n; i++)
		{
			int			fd = events[i].data.fd;

			if (fd < engine->nwatch && (engine->watch[fd] & WATCH_KEPT))
			{
				kept_ready(engine, fd);
				events[i].data.fd = -1;
			}
		}
		for (int i = 0; i < n; i++)
		{
			int			fd = events[i].data.fd;
			int			flags = 0;

			if (fd < 0)
				continue;
			if (events[i].events & EPOLLIN)
				flags |= CURL_CSELECT_IN;
			if (events[i].events & EPOLLOUT)
				flags |= CURL_CSELECT_OUT;
			if (events[i].events & (EPOLLERR | EPOLLHUP))
				flags |= CURL_CSELECT_ERR;
			curl_multi_socket_action(engine->multi, fd, flags, &still);
		}
		if (n < 64)
			break;
	}
	if (engine->timer_deadline >= 0 && engine->timer_deadline <= now_ms())
	{
		engine->timer_deadline = -1;
		curl_multi_socket_action(engine->multi, CURL_SOCKET_TIMEOUT, 0, &still);
	}
	sweep(engine);
	identities_prune(engine);
}

/*
 * identities_prune: once a second, free the pool of each client TLS
 * identity (tls_share_for) that has had no request for the idle limit
 * (IDLE_CONN_MAX_S).  None of its connections would be reused after that
 * long (CURLOPT_MAXAGE_CONN), but libcurl looks at a pool only when one of
 * its own requests runs, so the connections of an identity gone quiet,
 * and those its endpoint closed (CLOSE_WAIT), would stay open until its
 * next request or eviction.  What is lost is its TLS sessions: its next
 * connection makes a full handshake.
 */
static void
identities_prune(HttpEngine *engine)
{
	int64_t		now = now_ms();
	int			i = 0;

	if (now < engine->prune_at)
		return;
	engine->prune_at = now + 1000;
	while (i < engine->ntls_shares)
	{
		HttpShare  *share = engine->tls_shares[i];

		if (share->refs == 0 && now - share->used_ms >= engine->idle_max_s * 1000LL)
		{
			share_free(share);
			engine->tls_shares[i] = engine->tls_shares[--engine->ntls_shares];
		}
		else
			i++;
	}
}

/*
 * http_engine_set_idle_limit: seconds after which an idle connection is
 * not reused and a quiet client TLS identity's pool is freed
 * (IDLE_CONN_MAX_S unless changed; for the tests, which cannot wait that
 * long).  Applies to handles made from now on.
 */
void
http_engine_set_idle_limit(HttpEngine *engine, int seconds)
{
	engine->idle_max_s = seconds;
}

/*
 * sweep: once a second while requests are in flight, run every transfer
 * and ask again what each wants of its sockets (file header: a burst of
 * HTTP/2 requests libcurl 8.23 leaves unsent).  curl_multi_socket_all is
 * the event API's own call for this; libcurl marks it deprecated only in
 * favour of curl_multi_socket_action, which cannot run a transfer that no
 * event names.
 */
static void
sweep(HttpEngine *engine)
{
	int64_t		now;
	int			still;

	if (engine->running == 0)
	{
		engine->sweep_at = -1;
		return;
	}
	now = now_ms();
	if (engine->sweep_at < 0)
		engine->sweep_at = now + SWEEP_EVERY_MS;
	if (now < engine->sweep_at)
		return;
	engine->sweep_at = now + SWEEP_EVERY_MS;
	engine->sweeps++;
	CURL_IGNORE_DEPRECATION(curl_multi_socket_all(engine->multi, &still);)
}

/* http_engine_sweeps: how many sweeps the engine has made (for the tests). */
unsigned long
http_engine_sweeps(HttpEngine *engine)
{
	return engine->sweeps;
}

/*
 * answered_early: did an HTTP/2 request that failed get a whole answer
 * first?  A server may answer before it has read the request's body and
 * then reset the stream (RFC 9113, 8.1: the client must not discard the
 * answer).  libcurl 7.88 reports the transfer as failed then, with
 * CURLE_HTTP2_STREAM ("stream N closed": the upload found the stream
 * closed), and newer ones may with CURLE_SEND_ERROR; an upload left
 * waiting on the closed stream ends in a timeout.  Treating these as
 * transport failures retried requests the server had already answered:
 * duplicate deliveries.  The answer counts when its status is final, its
 * headers ended, and its body came whole (none for 204 and 304, else as
 * long as Content-Length said).
 */
static bool
answered_early(CURL *easy, const HttpRequest *req)
{
	curl_off_t	length = -1;

	if (req->http_version < CURL_HTTP_VERSION_2_0 || req->status < 200 ||
		!req->headers_done)
		return false;
	if (req->result != CURLE_HTTP2_STREAM && req->result != CURLE_SEND_ERROR &&
		req->result != CURLE_OPERATION_TIMEDOUT)
		return false;
	if (req->status == 204 || req->status == 304)
		return req->body_read == 0;
	if (curl_easy_getinfo(easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length) != CURLE_OK)
		return false;
	return length >= 0 && (curl_off_t) req->body_read == length;
}

/*
 * stale_connection: did a request fail because the kept-alive connection
 * it was sent on had been closed by the server?  libcurl 7.88 takes a TLS
 * connection whose server sent its close alert (nginx does, closing an
 * idle connection) for alive, as data is waiting on it, and writing the
 * request then fails.  Nothing of it was answered.  Only an HTTP/1
 * connection (plain http, or an https origin known to answer over
 * HTTP/1) qualifies: on HTTP/2 a send error may end a stream whose
 * request had gone out whole on a connection shared with others.  Even
 * on HTTP/1 an endpoint may have acted on a request it did not read to
 * the end, so the resend, like any retry, can deliver twice: delivery
 * is at least once.
 */
static bool
stale_connection(HttpEngine *engine, const HttpRequest *req)
{
	return req->result == CURLE_SEND_ERROR && req->status == 0 &&
		req->new_connections == 0 && !req->restarted &&
		!pipewait_wanted(engine, req->url);
}

/*
 * restart_fresh: start a request again, once, on a new connection (see
 * stale_connection); false when libcurl will not take it (it is then
 * handed back failed, on req->handle, which may be a new handle).  Under
 * libcurl before 8.1.0 the resend goes out on a new handle too (file
 * header, bug 1: the failed attempt may have stored headers).
 */
static bool
restart_fresh(HttpEngine *engine, HttpRequest *req)
{
	CURL	   *easy = req->handle->easy;
	HttpHandle *fresh = NULL;
	curl_off_t	spent_us = 0;
	long		left_ms;

	/*
	 * The resend gets what is left of the request's timeout, not a new
	 * one: a request must end within its timeout (the relay keeps that
	 * well inside the delivery's lease).
	 */
	curl_easy_getinfo(easy, CURLINFO_TOTAL_TIME_T, &spent_us);
	left_ms = req->timeout_ms - (long) (spent_us / 1000);
	if (left_ms < 10)
		return false;
	if (engine->old_curl &&
		(fresh = handle_new(engine, req->handle->own_tls ?
							tls_share_for(engine, req) : engine->share)) == NULL)
		return false;
	curl_multi_remove_handle(engine->multi, easy);
	if (fresh)
	{
		handle_free(engine, req->handle);
		handle_arm(engine, fresh, req);
		easy = fresh->easy;
	}
	request_reset(req);
	req->restarted = true;
	curl_easy_setopt(easy, CURLOPT_FRESH_CONNECT, 1L);
	curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, left_ms);
	if (curl_multi_add_handle(engine->multi, easy) != CURLM_OK)
	{
		req->result = CURLE_SEND_ERROR;
		return false;			/* the caller's removal finds it removed */
	}
	return true;
}

/*
 * http_engine_next_done: hand back one finished request with its outcome,
 * or NULL when none has finished.
 */
HttpRequest *
http_engine_next_done(HttpEngine *engine)
{
	CURLMsg    *msg;
	int			left;

	while ((msg = curl_multi_info_read(engine->multi, &left)) != NULL)
	{
		HttpRequest *req = NULL;
		CURL	   *easy = msg->easy_handle;

		if (msg->msg != CURLMSG_DONE)
			continue;
		curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **) &req);
		req->result = msg->data.result;
		curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &req->status);
		if (req->status < 100 || req->status > 999)
		{
			/*
			 * libcurl before 8.0 reads a status line "HTTP/2 n" with
			 * sscanf, even on HTTP/1.1, and may hand back any number (0
			 * too, with no error): an endpoint answering so did not answer.
			 */
			req->status = 0;
			if (req->result == CURLE_OK)
				req->result = CURLE_WEIRD_SERVER_REPLY;
		}
		if (req->result != CURLE_OK)
			curl_easy_getinfo(easy, CURLINFO_OS_ERRNO, &req->os_errno);
		curl_easy_getinfo(easy, CURLINFO_HTTP_VERSION, &req->http_version);
		curl_easy_getinfo(easy, CURLINFO_NUM_CONNECTS, &req->new_connections);
		if (stale_connection(engine, req) && restart_fresh(engine, req))
			continue;
		easy = req->handle->easy;	/* a failed restart may have changed it */
		if (req->result != CURLE_OK && answered_early(easy, req))
		{
			req->result = CURLE_OK;
			req->os_errno = 0;
			req->answered_early = true;
		}
		if (req->status > 0)
			origin_h1_learn(engine, req->url, req->http_version);
		curl_multi_remove_handle(engine->multi, easy);
		handle_put(engine, req->handle);
		req->handle = NULL;
		engine->running--;
		return req;
	}
	return NULL;
}

/*
 * http_engine_watch_changes: how many changes the engine has made to its
 * epoll set (for the tests: a kept-alive connection should cost none a
 * request).
 */
unsigned long
http_engine_watch_changes(HttpEngine *engine)
{
	return engine->watch_changes;
}

/* http_engine_running: requests started and not yet handed back. */
int
http_engine_running(HttpEngine *engine)
{
	return engine->running;
}

/*
 * http_request_describe_error: what went wrong with a request that got no
 * usable response, in words for last_error.
 */
void
http_request_describe_error(const HttpRequest *req, char *buf, size_t len)
{
	const char *what;

	if (req->refused[0])
	{
		snprintf(buf, len, "%s", req->refused);
		return;
	}
	switch (req->result)
	{
		case CURLE_COULDNT_RESOLVE_HOST:
			what = "could not resolve host";
			break;
		case CURLE_COULDNT_CONNECT:
			/* libcurl 7.88 says "Couldn't connect to server" for all */
			what = req->os_errno == ECONNREFUSED ? "could not connect (connection refused)" :
				req->os_errno == ETIMEDOUT ? "could not connect (timed out)" :
				(req->os_errno == ENETUNREACH || req->os_errno == EHOSTUNREACH) ?
				"could not connect (unreachable)" : "could not connect";
			break;
		case CURLE_OPERATION_TIMEDOUT:
			snprintf(buf, len, "timed out after %ld ms%s%s", req->timeout_ms,
					 req->errbuf[0] ? ": " : "", req->errbuf);
			return;
		case CURLE_SSL_CONNECT_ERROR:
		case CURLE_PEER_FAILED_VERIFICATION:
		case CURLE_SSL_CERTPROBLEM:
		case CURLE_SSL_CIPHER:
		case CURLE_SSL_CACERT_BADFILE:
		case CURLE_SSL_ISSUER_ERROR:
			what = "TLS failure";
			break;
		case CURLE_UNSUPPORTED_PROTOCOL:
			what = "protocol not allowed";
			break;
		case CURLE_GOT_NOTHING:
			what = "empty reply from server";
			break;
		case CURLE_SEND_ERROR:
		case CURLE_RECV_ERROR:
			what = "connection broken";
			break;
		default:
			what = curl_easy_strerror(req->result);
			break;
	}
	snprintf(buf, len, "%s%s%s", what, req->errbuf[0] ? ": " : "", req->errbuf);
}
