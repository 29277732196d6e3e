/*-------------------------------------------------------------------------
 *
 * http_engine.c
 *	  libFuzzer target: the relay's HTTP engine (src/pure/http.c) against
 *	  a hostile endpoint.  A small HTTP server in the same process, on an
 *	  ephemeral port of 127.0.0.1, answers the engine's POST with the
 *	  fuzzed bytes as the raw response; then the same engine sends a
 *	  second request to the same server, which answers it properly.
 *
 * The first byte of the input says how the server behaves, the rest is
 * the response it writes:
 *
 *	bit 0	set: close the connection once the response is written;
 *			clear: keep it open and write nothing more (the engine then
 *			stops at its request timeout, kept short)
 *	bit 1	set: follow the response with more than HTTP_BODY_READ_MAX
 *			bytes of filler, to reach the engine's bounded read
 *
 * The server tells the two requests apart by their path (/fuzz, /ok), so
 * that a first request that times out before the server has read it
 * cannot leave the fuzzed answer to the second.  The well-formed answer
 * carries "Retry-After: n", n counting the answers, which the engine
 * hands back: the second request must get the answer the server wrote
 * for it, not something left of the first.  One well-formed request runs
 * before the first input, so that every input starts on an easy handle
 * that has stored headers before (as in a relay, which reuses its
 * handles).
 *
 * One thread drives both the engine and the server, with poll() on the
 * engine's descriptor and the server's sockets, and a bound on turns and
 * on time so that no input can hang the fuzzer.  The engine and the
 * server are made once and serve every input, as a relay's engine serves
 * every request; the server closes its connections after each input, so
 * that each input starts on a new one.
 *
 * Invariants: the engine hands the request back, and only it, with a
 * status of 0 or from 100 to 999 (at least 100 when the transfer
 * succeeded), the first bytes of the body kept NUL-terminated within
 * HTTP_BODY_KEEP, a body cut exactly when more than HTTP_BODY_READ_MAX
 * bytes came (and then a write error), and an error description that
 * fits its buffer.  Then the second request, on the same engine, is
 * answered 204 without error by the server: whatever the endpoint did,
 * the engine is not left broken.
 *
 * The invariants hold on every libcurl version.  Three bugs of libcurl
 * before 8.1.0 (Debian 12 has 7.88.1) that this target found are guarded
 * against in http.c (its file header): a use after free when a reused
 * easy handle gets a response whose first header is folded (curl issue
 * 11101: regression-folded-first-header; the well-formed request before
 * the first input makes every input start after stored headers), a
 * connection reused with the rest of an earlier response waiting on it
 * (curl pull request 10690: regression-leftovers-after-304, an answer and
 * filler longer than libcurl reads at once), and an out-of-range status
 * from "HTTP/2 n" on HTTP/1.1 (regression-http2-status-*).
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE				/* accept4, memmem */
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "http.h"
#include "fuzz.h"

#define MAX_CONNS		8
#define FIRST_TIMEOUT_MS	200 /* the fuzzed request, connection closed */
#define STALL_TIMEOUT_MS	5	/* the fuzzed request, connection kept open */
#define SECOND_TIMEOUT_MS	2000	/* the well-formed request after it */
#define SLACK_MS		3000	/* beyond its timeout, before we give up */
#define MAX_TURNS		100000
#define FILLER_LEN		(HTTP_BODY_READ_MAX + 4096)

#define MODE_CLOSE		0x01
#define MODE_FILLER		0x02

/* One connection the server accepted. */
typedef struct Conn
{
	int			fd;				/* -1: slot free */
	char		in[4096];		/* what came of the request so far */
	size_t		inlen;
	const char *out;			/* answer still to write */
	size_t		outlen;
	bool		close_after;	/* close once out is written */
	char		ok[96];			/* its well-formed answer */
} Conn;

/* The server: its listening socket, connections, and this input's answer. */
typedef struct Server
{
	int			listen_fd;
	int			port;
	Conn		conns[MAX_CONNS];
	char	   *answer;			/* the fuzzed response (and filler) */
	size_t		answer_len;
	bool		close_after;
	int			sent_ok;		/* well-formed answers written */
} Server;

static const char post_body[] = "{\"id\": 1, \"topic\": \"fuzz\"}";

/*
 * The engine lives as long as the process, as in a relay, and is reached
 * from a static: nothing of it is a leak.
 */
static Server server;
static HttpEngine *engine;
static char url_fuzz[64];
static char url_ok[64];

/* now_ms: a monotonic clock in milliseconds. */
static int64_t
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* server_start: listen on an ephemeral port of 127.0.0.1. */
static void
server_start(Server *srv)
{
	struct sockaddr_in sa;
	socklen_t	salen = sizeof(sa);

	memset(srv, 0, sizeof(*srv));
	for (int i = 0; i < MAX_CONNS; i++)
		srv->conns[i].fd = -1;
	srv->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (srv->listen_fd < 0 ||
		bind(srv->listen_fd, (struct sockaddr *) &sa, sizeof(sa)) != 0 ||
		listen(srv->listen_fd, 64) != 0 ||
		getsockname(srv->listen_fd, (struct sockaddr *) &sa, &salen) != 0)
	{
		perror("http_engine fuzz server");
		abort();
	}
	srv->port = ntohs(sa.sin_port);
}

/* conn_close: the server closes one connection. */
static void
conn_close(Conn *c)
{
	close(c->fd);
	c->fd = -1;
	c->inlen = 0;
	c->out = NULL;
	c->outlen = 0;
	c->close_after = false;
}

/* server_close_all: the server closes every connection it has. */
static void
server_close_all(Server *srv)
{
	for (int i = 0; i < MAX_CONNS; i++)
		if (srv->conns[i].fd >= 0)
			conn_close(&srv->conns[i]);
}

/*
 * request_length: the length of the whole request at the start of buf
 * (headers and the body Content-Length announces), or 0 while it is not
 * all there.
 */
static size_t
request_length(const char *buf, size_t len)
{
	const char *end = memmem(buf, len, "\r\n\r\n", 4);
	const char *cl;
	size_t		head;
	size_t		body = 0;

	if (end == NULL)
		return 0;
	head = (size_t) (end - buf) + 4;
	cl = memmem(buf, head, "\r\nContent-Length:", 17);
	if (cl)
		body = (size_t) strtoul(cl + 17, NULL, 10);
	return (len >= head + body) ? head + body : 0;
}

/* conn_flush: write what it can of the connection's answer. */
static void
conn_flush(Conn *c)
{
	while (c->outlen > 0)
	{
		ssize_t		n = send(c->fd, c->out, c->outlen, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0)
		{
			if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
				return;
			conn_close(c);		/* the engine gave up on it */
			return;
		}
		c->out += n;
		c->outlen -= (size_t) n;
	}
	if (c->close_after)
		conn_close(c);
}

/*
 * conn_read: take what came on a connection and answer each whole
 * request: a POST to /fuzz with this input's bytes, any other with a 204.
 */
static void
conn_read(Server *srv, Conn *c)
{
	ssize_t		n;
	size_t		whole;

	n = recv(c->fd, c->in + c->inlen, sizeof(c->in) - c->inlen, MSG_DONTWAIT);
	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
	{
		conn_close(c);
		return;
	}
	if (n > 0)
		c->inlen += (size_t) n;
	while (c->fd >= 0 && c->outlen == 0 && !c->close_after &&
		   (whole = request_length(c->in, c->inlen)) > 0)
	{
		bool		fuzz = c->inlen > 11 && memcmp(c->in, "POST /fuzz ", 11) == 0;

		memmove(c->in, c->in + whole, c->inlen - whole);
		c->inlen -= whole;
		if (fuzz)
		{
			c->out = srv->answer;
			c->outlen = srv->answer_len;
			c->close_after = srv->close_after;
		}
		else
		{
			srv->sent_ok++;
			c->outlen = (size_t) snprintf(c->ok, sizeof(c->ok),
										  "HTTP/1.1 204 No Content\r\n"
										  "Retry-After: %d\r\n\r\n", srv->sent_ok);
			c->out = c->ok;
		}
		conn_flush(c);
	}
	if (c->fd >= 0 && c->inlen == sizeof(c->in))
		conn_close(c);			/* no request of the engine is this long */
}

/* server_accept: take every connection waiting on the listening socket. */
static void
server_accept(Server *srv)
{
	int			fd;

	while ((fd = accept4(srv->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0)
	{
		int			i;

		for (i = 0; i < MAX_CONNS && srv->conns[i].fd >= 0; i++)
			;
		if (i == MAX_CONNS)
		{
			close(fd);
			continue;
		}
		memset(&srv->conns[i], 0, sizeof(Conn));
		srv->conns[i].fd = fd;
	}
}

/*
 * drive: run the engine and the server until the engine hands req back.
 * Aborts if it does not within req's timeout and some slack: whatever
 * the server sent, the request must end.
 */
static void
drive(HttpRequest *req)
{
	int64_t		deadline = now_ms() + req->timeout_ms + SLACK_MS;

	for (int turn = 0; turn < MAX_TURNS; turn++)
	{
		struct pollfd pfd[2 + MAX_CONNS];
		int			map[2 + MAX_CONNS];
		int			n = 0;
		long		wait = http_engine_timeout(engine);
		HttpRequest *done;

		pfd[n].fd = http_engine_fd(engine);
		pfd[n].events = POLLIN;
		map[n++] = -1;
		pfd[n].fd = server.listen_fd;
		pfd[n].events = POLLIN;
		map[n++] = -1;
		for (int i = 0; i < MAX_CONNS; i++)
		{
			Conn	   *c = &server.conns[i];

			if (c->fd < 0)
				continue;
			pfd[n].fd = c->fd;
			pfd[n].events = POLLIN | (c->outlen > 0 ? POLLOUT : 0);
			map[n++] = i;
		}
		if (wait < 0 || wait > 50)
			wait = 50;
		poll(pfd, n, (int) wait);

		if (pfd[1].revents)
			server_accept(&server);
		for (int k = 2; k < n; k++)
		{
			Conn	   *c = &server.conns[map[k]];

			if (c->fd != pfd[k].fd || pfd[k].revents == 0)
				continue;
			if (c->outlen > 0 && (pfd[k].revents & (POLLOUT | POLLERR | POLLHUP)))
				conn_flush(c);
			if (c->fd >= 0 && (pfd[k].revents & (POLLIN | POLLERR | POLLHUP)))
				conn_read(&server, c);
		}

		http_engine_perform(engine);
		done = http_engine_next_done(engine);
		if (done != NULL)
		{
			CHECK(done == req);
			CHECK(http_engine_next_done(engine) == NULL);
			CHECK(http_engine_running(engine) == 0);
			return;
		}
		if (now_ms() > deadline)
			break;
	}
	fprintf(stderr, "request not handed back within %ld ms and %d ms of slack\n",
			req->timeout_ms, SLACK_MS);
	CHECK(!"the engine hands every request back");
}

/* request_init: a POST of a small body to url, in timeout_ms. */
static void
request_init(HttpRequest *req, const char *url, long timeout_ms)
{
	memset(req, 0, sizeof(*req));
	req->url = url;
	req->body = post_body;
	req->body_len = sizeof(post_body) - 1;
	req->timeout_ms = timeout_ms;
}

/*
 * check_outcome: what the engine says of any finished request holds up.
 */
static void
check_outcome(const HttpRequest *req)
{
	bool		status_ok = req->status == 0 ||
		(req->status >= 100 && req->status <= 999);
	char		what[512];
	char		tiny[8];
	size_t		len;

	if (!status_ok || (req->result == CURLE_OK && req->status < 100))
		fprintf(stderr, "status %ld, result %d (%s)\n", req->status,
				(int) req->result, req->errbuf);
	CHECK(req->handle == NULL);
	CHECK(req->engine == engine);
	CHECK(status_ok);
	if (req->result == CURLE_OK)
		CHECK(req->status >= 100);
	if (req->result == CURLE_OK)
		CHECK(req->os_errno == 0);
	CHECK(req->body_start_len <= HTTP_BODY_KEEP);
	CHECK(req->body_start[req->body_start_len] == '\0');
	CHECK(req->body_start_len ==
		  (req->body_read < HTTP_BODY_KEEP ? req->body_read : HTTP_BODY_KEEP));
	CHECK(req->body_cut == (req->body_read > HTTP_BODY_READ_MAX));
	if (req->body_cut)
		CHECK(req->result == CURLE_WRITE_ERROR);
	if (req->has_retry_after)
		CHECK(req->retry_after_ms >= 0);
	CHECK(req->refused[0] == '\0'); /* loopback is allowed here */
	CHECK(memchr(req->errbuf, '\0', sizeof(req->errbuf)) != NULL);

	memset(what, 0x7f, sizeof(what));
	http_request_describe_error(req, what, sizeof(what));
	len = strnlen(what, sizeof(what));
	CHECK(len > 0 && len < sizeof(what));
	memset(tiny, 0x7f, sizeof(tiny));
	http_request_describe_error(req, tiny, sizeof(tiny));
	CHECK(strnlen(tiny, sizeof(tiny)) == (len < sizeof(tiny) ? len : sizeof(tiny) - 1));
	CHECK(strncmp(tiny, what, sizeof(tiny) - 1) == 0);
}

/*
 * well_formed: a request to /ok must be answered 204 by the server itself
 * (not by anything left of an earlier answer: its Retry-After is the one
 * the server wrote last), without error.
 */
static void
well_formed(HttpRequest *req)
{
	bool		good;

	request_init(req, url_ok, SECOND_TIMEOUT_MS);
	CHECK(http_engine_start(engine, req));
	drive(req);
	check_outcome(req);
	good = req->result == CURLE_OK && req->status == 204 &&
		req->body_read == 0 && !req->body_cut &&
		req->has_retry_after && req->retry_after_ms == (int64_t) server.sent_ok * 1000;
	if (!good)
	{
		char		what[512];

		http_request_describe_error(req, what, sizeof(what));
		fprintf(stderr, "well-formed request: result %d, status %ld, body %zu bytes, "
				"Retry-After %s%lld ms (answer %d): %s\n",
				(int) req->result, req->status, req->body_read,
				req->has_retry_after ? "" : "none, ",
				(long long) req->retry_after_ms, server.sent_ok, what);
	}
	CHECK(req->result == CURLE_OK);
	CHECK(req->status == 204);
	CHECK(req->body_read == 0 && !req->body_cut);
	CHECK(req->has_retry_after);
	CHECK(req->retry_after_ms == (int64_t) server.sent_ok * 1000);
}

/*
 * LLVMFuzzerInitialize: libcurl, the server and the engine, once for the
 * whole run, and one well-formed request on the engine.  libcurl reads no
 * ~/.curlrc (only the curl tool does), and the engine turns off proxies
 * from the environment itself.
 */
int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	static HttpRequest req;

	CHECK(curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK);
	server_start(&server);
	snprintf(url_fuzz, sizeof(url_fuzz), "http://127.0.0.1:%d/fuzz", server.port);
	snprintf(url_ok, sizeof(url_ok), "http://127.0.0.1:%d/ok", server.port);
	engine = http_engine_create();
	CHECK(engine != NULL);
	http_engine_configure(engine, NULL, false, NULL, MAX_CONNS);
	well_formed(&req);
	server_close_all(&server);
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static HttpRequest req;		/* static: the engine keeps pointers to it */
	uint8_t		mode = size > 0 ? data[0] : 0;
	const char *response = size > 0 ? (const char *) data + 1 : "";
	size_t		rlen = size > 0 ? size - 1 : 0;
	size_t		filler = (mode & MODE_FILLER) ? FILLER_LEN : 0;

	/* this input's answer, in a buffer of its own */
	server.answer_len = rlen + filler;
	server.answer = malloc(server.answer_len ? server.answer_len : 1);
	CHECK(server.answer != NULL);
	if (rlen)
		memcpy(server.answer, response, rlen);
	memset(server.answer + rlen, 'x', filler);
	server.close_after = (mode & MODE_CLOSE) != 0;

	/* 1. the fuzzed response */
	request_init(&req, url_fuzz, server.close_after ? FIRST_TIMEOUT_MS : STALL_TIMEOUT_MS);
	CHECK(http_engine_start(engine, &req));
	drive(&req);
	check_outcome(&req);

	/* 2. a well-formed 204 from the same server, on the same engine */
	well_formed(&req);

	/* every input starts on a new connection */
	server_close_all(&server);
	free(server.answer);
	server.answer = NULL;
	server.answer_len = 0;
	return 0;
}
