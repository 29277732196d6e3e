/*-------------------------------------------------------------------------
 *
 * test_http.c
 *	  Unit tests of src/pure/http.c, the relay's HTTP engine, against a small
 *	  HTTP/1.1 server run in the same process (one thread: the test loop
 *	  drives the engine and the server in turn).  Checked: requests are
 *	  answered and a kept-alive connection is reused; once it is, a request
 *	  changes nothing in the engine's epoll set; a connection the server
 *	  closes while idle leaves the set at once (the engine's descriptor does
 *	  not stay ready, so the relay would not spin) and the next request
 *	  connects again; a refused connection is reported and the next one
 *	  works; requests in flight together all finish.  Prints TAP.
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE				/* memmem, strcasestr */
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "http.h"
#include "tap.h"

/*
 * The engine lives as long as its process, as in a relay: there is no
 * destroy, so its multi handle is still allocated at exit.
 */
const char *__asan_default_options(void);
const char *
__asan_default_options(void)
{
	return "detect_leaks=0";
}

#define MAX_CONNS 64

/* The test server: a listening socket and its connections. */
typedef struct Server
{
	int			listen_fd;
	int			port;
	int			conns[MAX_CONNS];
	char		buf[MAX_CONNS][4096];
	size_t		len[MAX_CONNS];
	int			accepted;
	int			answered;
} Server;

static Server server;

/* server_start: listen on an ephemeral port of 127.0.0.1. */
static void
server_start(Server *srv)
{
	struct sockaddr_in sa;
	socklen_t	salen = sizeof(sa);

	memset(srv, 0, sizeof(*srv));
	for (int i = 0; i < MAX_CONNS; i++)
		srv->conns[i] = -1;
	srv->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(srv->listen_fd, (struct sockaddr *) &sa, sizeof(sa)) != 0 ||
		listen(srv->listen_fd, 64) != 0 ||
		getsockname(srv->listen_fd, (struct sockaddr *) &sa, &salen) != 0)
	{
		perror("test server");
		exit(1);
	}
	srv->port = ntohs(sa.sin_port);
}

/*
 * request_complete: does buf hold a whole request (headers and the body
 * Content-Length announces)?  Returns its length, or 0.
 */
static size_t
request_complete(const char *buf, size_t len)
{
	const char *end = memmem(buf, len, "\r\n\r\n", 4);
	const char *cl;
	size_t		head;
	size_t		body = 0;

	if (end == NULL)
		return 0;
	head = (size_t) (end - buf) + 4;
	cl = strcasestr(buf, "\r\nContent-Length:");
	if (cl && cl < end)
		body = (size_t) strtoul(cl + 17, NULL, 10);
	return (len >= head + body) ? head + body : 0;
}

/* server_serve: accept, read, and answer each whole request with a 204. */
static void
server_serve(Server *srv)
{
	static const char answer[] = "HTTP/1.1 204 No Content\r\n\r\n";
	struct pollfd pfd = {.fd = srv->listen_fd, .events = POLLIN};

	while (poll(&pfd, 1, 0) == 1)
	{
		int			fd = accept(srv->listen_fd, NULL, NULL);
		int			i;

		for (i = 0; i < MAX_CONNS && srv->conns[i] >= 0; i++)
			;
		if (fd < 0 || i == MAX_CONNS)
		{
			perror("test server accept");
			exit(1);
		}
		srv->conns[i] = fd;
		srv->len[i] = 0;
		srv->accepted++;
	}
	for (int i = 0; i < MAX_CONNS; i++)
	{
		struct pollfd cp = {.fd = srv->conns[i], .events = POLLIN};
		ssize_t		n;
		size_t		whole;

		if (srv->conns[i] < 0 || poll(&cp, 1, 0) != 1)
			continue;
		n = read(srv->conns[i], srv->buf[i] + srv->len[i],
				 sizeof(srv->buf[i]) - srv->len[i]);
		if (n <= 0)
		{
			close(srv->conns[i]);
			srv->conns[i] = -1;
			continue;
		}
		srv->len[i] += (size_t) n;
		while ((whole = request_complete(srv->buf[i], srv->len[i])) > 0)
		{
			if (write(srv->conns[i], answer, sizeof(answer) - 1) != sizeof(answer) - 1)
			{
				perror("test server write");
				exit(1);
			}
			memmove(srv->buf[i], srv->buf[i] + whole, srv->len[i] - whole);
			srv->len[i] -= whole;
			srv->answered++;
		}
	}
}

/* server_close_all: the server closes every connection it has. */
static void
server_close_all(Server *srv)
{
	for (int i = 0; i < MAX_CONNS; i++)
		if (srv->conns[i] >= 0)
		{
			close(srv->conns[i]);
			srv->conns[i] = -1;
		}
}

/* engine_ready: is the engine's descriptor ready (something to do)? */
static bool
engine_ready(HttpEngine *engine)
{
	struct pollfd pfd = {.fd = http_engine_fd(engine), .events = POLLIN};

	return poll(&pfd, 1, 0) == 1;
}

/* request_init: a POST of a small body to path on the test server. */
static void
request_init(HttpRequest *req, char *url, size_t urlsize, int port)
{
	static const char body[] = "{\"order\": 1}";

	memset(req, 0, sizeof(*req));
	snprintf(url, urlsize, "http://127.0.0.1:%d/hook", port);
	req->url = url;
	req->body = body;
	req->body_len = sizeof(body) - 1;
	req->timeout_ms = 5000;
}

/*
 * run: start n requests and drive the engine and the server until all are
 * handed back (or 10 s pass).  Returns how many came back.
 */
static int
run(HttpEngine *engine, HttpRequest *reqs, int n)
{
	int			done = 0;

	for (int i = 0; i < n; i++)
		if (!http_engine_start(engine, &reqs[i]))
			done++;
	for (int turn = 0; turn < 10000 && done < n; turn++)
	{
		struct pollfd pfd = {.fd = http_engine_fd(engine), .events = POLLIN};
		long		t = http_engine_timeout(engine);

		poll(&pfd, 1, (t < 0 || t > 1) ? 1 : (int) t);
		http_engine_perform(engine);
		while (http_engine_next_done(engine) != NULL)
			done++;
		server_serve(&server);
	}
	return done;
}

/* one: a single request on reqs[0]; true when it got a 204. */
static bool
one(HttpEngine *engine, HttpRequest *req, int port)
{
	char		url[64];

	request_init(req, url, sizeof(url), port);
	return run(engine, req, 1) == 1 && req->result == CURLE_OK && req->status == 204;
}

int
main(void)
{
	HttpEngine *engine;
	HttpRequest reqs[8];
	char		urls[8][64];
	unsigned long before;
	int			good;
	int			closed_port;

	(void) is_str;				/* tap.h's, unused here */
	curl_global_init(CURL_GLOBAL_DEFAULT);
	server_start(&server);
	engine = http_engine_create();
	ok(engine != NULL, "engine created");
	http_engine_configure(engine, NULL, false, NULL);

	ok(one(engine, &reqs[0], server.port), "a request is answered 204");
	is_int(server.accepted, 1, "over one connection");

	/* the connection is kept alive: no change to the epoll set a request */
	good = 0;
	before = http_engine_watch_changes(engine);
	for (int i = 0; i < 50; i++)
		good += one(engine, &reqs[0], server.port);
	is_int(good, 50, "50 more requests, one after another, are answered");
	is_int(server.accepted, 1, "all on the kept-alive connection");
	is_int((long long) (http_engine_watch_changes(engine) - before), 0,
		   "they change nothing in the engine's epoll set");

	/* the server closes the idle connection */
	server_close_all(&server);
	for (int turn = 0; turn < 200 && !engine_ready(engine); turn++)
		usleep(1000);
	ok(engine_ready(engine), "the idle connection's close makes the engine ready");
	http_engine_perform(engine);
	ok(!engine_ready(engine), "one perform takes it out: the engine is not ready again");
	ok(one(engine, &reqs[0], server.port), "the next request is answered");
	is_int(server.accepted, 2, "over a new connection");

	/* a refused connection, then the server again */
	{
		int			fd = socket(AF_INET, SOCK_STREAM, 0);
		struct sockaddr_in sa;
		socklen_t	salen = sizeof(sa);

		memset(&sa, 0, sizeof(sa));
		sa.sin_family = AF_INET;
		sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		bind(fd, (struct sockaddr *) &sa, sizeof(sa));
		getsockname(fd, (struct sockaddr *) &sa, &salen);
		closed_port = ntohs(sa.sin_port);
		close(fd);				/* bound once, nothing listens there now */
	}
	request_init(&reqs[0], urls[0], sizeof(urls[0]), closed_port);
	ok(run(engine, reqs, 1) == 1 && reqs[0].result == CURLE_COULDNT_CONNECT,
	   "a port nobody listens on: could not connect");
	{
		char		what[512];

		http_request_describe_error(&reqs[0], what, sizeof(what));
		ok(reqs[0].os_errno == ECONNREFUSED &&
		   strncmp(what, "could not connect (connection refused)", 38) == 0,
		   "and says the connection was refused: %s", what);
	}
	ok(one(engine, &reqs[0], server.port), "a request after it is answered");

	/* closing connections again and again: descriptor numbers come back */
	good = 0;
	for (int i = 0; i < 20; i++)
	{
		server_close_all(&server);
		for (int turn = 0; turn < 200 && !engine_ready(engine); turn++)
			usleep(1000);
		http_engine_perform(engine);
		good += one(engine, &reqs[0], server.port);
	}
	is_int(good, 20, "20 requests, each after the server closed the connection, are answered");

	/* several in flight at once */
	for (int i = 0; i < 8; i++)
		request_init(&reqs[i], urls[i], sizeof(urls[i]), server.port);
	is_int(run(engine, reqs, 8), 8, "8 requests in flight together all finish");
	good = 0;
	for (int i = 0; i < 8; i++)
		good += (reqs[i].result == CURLE_OK && reqs[i].status == 204);
	is_int(good, 8, "all 8 answered 204");
	before = http_engine_watch_changes(engine);
	for (int i = 0; i < 8; i++)
		request_init(&reqs[i], urls[i], sizeof(urls[i]), server.port);
	run(engine, reqs, 8);
	good = 0;
	for (int i = 0; i < 8; i++)
		good += (reqs[i].result == CURLE_OK && reqs[i].status == 204);
	is_int(good, 8, "8 more together, on the same connections, all answered");
	ok(http_engine_watch_changes(engine) - before <= 2 * 8,
	   "at most the changes of the events wanted (%lu)",
	   http_engine_watch_changes(engine) - before);

	return done_testing();
}
