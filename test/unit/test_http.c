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
 *	  works; requests in flight together all finish.  Then the pool: one
 *	  request at a time to each of ten origins in turn keeps ten
 *	  connections open (libcurl alone keeps four per request in flight).
 *	  And https, against the same server speaking TLS with a certificate
 *	  made here: every request offers HTTP/2 by ALPN and takes HTTP/1.1
 *	  when the server picks it; requests in flight together to an origin
 *	  not yet known all finish (waiting for a first connection that turns
 *	  out HTTP/1.1 does not stall them); connections opened later by other
 *	  handles resume the TLS session; a request sent on a connection the
 *	  server closed with a TLS close alert is sent again on a new one (and
 *	  answered); a configure with the same CA file
 *	  keeps the sessions, a new CA file does not resume them.  And the two
 *	  bugs of libcurl before 8.1.0 http.c guards against: a response whose
 *	  first header is folded, after answers with headers (a use after free
 *	  on a reused handle: AddressSanitizer stops the test), and bytes an
 *	  endpoint writes beyond its answer or while the connection is idle,
 *	  which must not be taken for the next request's answer.  No network
 *	  is used.  Prints TAP.
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE				/* memmem, strcasestr */
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

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
#define MAX_LISTEN 10

/*
 * The test server: listening sockets (each a port, so an origin of its
 * own) and their connections; with ctx set, it speaks TLS.
 */
typedef struct Server
{
	int			listen_fd[MAX_LISTEN];
	int			ports[MAX_LISTEN];
	int			nlisten;
	int			port;			/* ports[0] */
	int			conns[MAX_CONNS];
	SSL		   *ssl[MAX_CONNS];
	bool		handshaken[MAX_CONNS];
	char		buf[MAX_CONNS][4096];
	size_t		len[MAX_CONNS];
	int			accepted;
	int			answered;
	SSL_CTX    *ctx;			/* TLS when set */
	int			handshakes;		/* TLS handshakes completed */
	int			resumed;		/* ... of which resumed a session */
	int			offered_h2;		/* ... of which the client offered h2 */
} Server;

static Server server;

/* the answer to the next request, when not the usual 204 (then cleared) */
static const char *next_answer;
static size_t next_answer_len;

/* server_listen: one more listening socket on an ephemeral port of 127.0.0.1. */
static void
server_listen(Server *srv)
{
	struct sockaddr_in sa;
	socklen_t	salen = sizeof(sa);
	int			fd = socket(AF_INET, SOCK_STREAM, 0);

	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (srv->nlisten == MAX_LISTEN ||
		bind(fd, (struct sockaddr *) &sa, sizeof(sa)) != 0 ||
		listen(fd, 64) != 0 ||
		getsockname(fd, (struct sockaddr *) &sa, &salen) != 0)
	{
		perror("test server");
		exit(1);
	}
	srv->listen_fd[srv->nlisten] = fd;
	srv->ports[srv->nlisten++] = ntohs(sa.sin_port);
	srv->port = srv->ports[0];
}

/* server_start: listen on an ephemeral port of 127.0.0.1. */
static void
server_start(Server *srv)
{
	memset(srv, 0, sizeof(*srv));
	for (int i = 0; i < MAX_CONNS; i++)
		srv->conns[i] = -1;
	server_listen(srv);
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

/* server_drop: the server closes connection i (a TLS close first, as nginx does). */
static void
server_drop(Server *srv, int i)
{
	if (srv->ssl[i])
	{
		if (srv->handshaken[i])
			SSL_shutdown(srv->ssl[i]);
		SSL_free(srv->ssl[i]);
		srv->ssl[i] = NULL;
	}
	close(srv->conns[i]);
	srv->conns[i] = -1;
}

/*
 * server_read: read what connection i has (through TLS when it speaks
 * it, the handshake first); returns bytes read, 0 when there is nothing
 * yet, -1 when the connection is over.
 */
static ssize_t
server_read(Server *srv, int i)
{
	char	   *at = srv->buf[i] + srv->len[i];
	size_t		room = sizeof(srv->buf[i]) - srv->len[i];
	int			n;

	if (srv->ssl[i] == NULL)
	{
		struct pollfd cp = {.fd = srv->conns[i], .events = POLLIN};
		ssize_t		r;

		if (poll(&cp, 1, 0) != 1)
			return 0;
		r = read(srv->conns[i], at, room);
		return r > 0 ? r : -1;
	}
	if (!srv->handshaken[i])
	{
		n = SSL_accept(srv->ssl[i]);
		if (n != 1)
		{
			int			e = SSL_get_error(srv->ssl[i], n);

			return (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) ? 0 : -1;
		}
		srv->handshaken[i] = true;
		srv->handshakes++;
		srv->resumed += SSL_session_reused(srv->ssl[i]);
	}
	n = SSL_read(srv->ssl[i], at, (int) room);
	if (n > 0)
		return n;
	n = SSL_get_error(srv->ssl[i], n);
	return (n == SSL_ERROR_WANT_READ || n == SSL_ERROR_WANT_WRITE) ? 0 : -1;
}

/* server_write: send the answer on connection i; exits on failure. */
static void
server_write(Server *srv, int i, const char *data, size_t len)
{
	ssize_t		n;

	if (srv->ssl[i])
		n = SSL_write(srv->ssl[i], data, (int) len);
	else
		n = write(srv->conns[i], data, len);
	if (n != (ssize_t) len)
	{
		perror("test server write");
		exit(1);
	}
}

/* server_serve: accept, read, and answer each whole request with a 204. */
static void
server_serve(Server *srv)
{
	static const char answer[] = "HTTP/1.1 204 No Content\r\n\r\n";

	for (int l = 0; l < srv->nlisten; l++)
	{
		struct pollfd pfd = {.fd = srv->listen_fd[l], .events = POLLIN};

		while (poll(&pfd, 1, 0) == 1)
		{
			int			fd = accept(srv->listen_fd[l], NULL, NULL);
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
			srv->handshaken[i] = false;
			srv->accepted++;
			if (srv->ctx)
			{
				fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
				srv->ssl[i] = SSL_new(srv->ctx);
				SSL_set_fd(srv->ssl[i], fd);
			}
		}
	}
	for (int i = 0; i < MAX_CONNS; i++)
	{
		ssize_t		n;
		size_t		whole;

		if (srv->conns[i] < 0)
			continue;
		while ((n = server_read(srv, i)) > 0)
			srv->len[i] += (size_t) n;
		if (n < 0)
		{
			server_drop(srv, i);
			continue;
		}
		while ((whole = request_complete(srv->buf[i], srv->len[i])) > 0)
		{
			if (next_answer)
			{
				server_write(srv, i, next_answer, next_answer_len);
				next_answer = NULL;
			}
			else
				server_write(srv, i, answer, sizeof(answer) - 1);
			memmove(srv->buf[i], srv->buf[i] + whole, srv->len[i] - whole);
			srv->len[i] -= whole;
			srv->answered++;
		}
	}
}

/* server_open: how many connections the server has open. */
static int
server_open(Server *srv)
{
	int			n = 0;

	for (int i = 0; i < MAX_CONNS; i++)
		n += (srv->conns[i] >= 0);
	return n;
}

/* server_close_all: the server closes every connection it has. */
static void
server_close_all(Server *srv)
{
	for (int i = 0; i < MAX_CONNS; i++)
		if (srv->conns[i] >= 0)
			server_drop(srv, i);
}

/*
 * alpn_cb: the server's choice among the protocols the client offers by
 * ALPN: always HTTP/1.1 (this server speaks no HTTP/2), noting whether h2
 * was offered.
 */
static int
alpn_cb(SSL *ssl, const unsigned char **out, unsigned char *outlen,
		const unsigned char *in, unsigned int inlen, void *arg)
{
	Server	   *srv = (Server *) arg;
	bool		h1 = false;

	for (unsigned int i = 0; i < inlen; i += 1 + in[i])
	{
		if (in[i] == 2 && i + 3 <= inlen && memcmp(in + i + 1, "h2", 2) == 0)
			srv->offered_h2++;
		if (in[i] == 8 && i + 9 <= inlen && memcmp(in + i + 1, "http/1.1", 8) == 0)
		{
			*out = in + i + 1;
			*outlen = 8;
			h1 = true;
		}
	}
	return h1 ? SSL_TLSEXT_ERR_OK : SSL_TLSEXT_ERR_NOACK;
}

/*
 * tls_setup: a key and a self-signed certificate for IP 127.0.0.1 made
 * now, the server's TLS context, and the certificate written to the
 * files ca and ca2 (the CA files the engine is given).
 */
static void
tls_setup(Server *srv, char *ca, char *ca2)
{
	EVP_PKEY   *key = EVP_EC_gen("P-256");
	X509	   *cert = X509_new();
	X509_NAME  *name;
	X509V3_CTX	v3;
	X509_EXTENSION *ext;
	char	   *files[] = {ca, ca2};

	name = X509_get_subject_name(cert);
	X509_set_version(cert, 2);
	ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
	X509_gmtime_adj(X509_getm_notBefore(cert), -60);
	X509_gmtime_adj(X509_getm_notAfter(cert), 24 * 3600);
	X509_set_pubkey(cert, key);
	X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
							   (const unsigned char *) "127.0.0.1", -1, -1, 0);
	X509_set_issuer_name(cert, name);
	X509V3_set_ctx_nodb(&v3);
	X509V3_set_ctx(&v3, cert, cert, NULL, NULL, 0);
	ext = X509V3_EXT_conf_nid(NULL, &v3, NID_subject_alt_name, "IP:127.0.0.1");
	X509_add_ext(cert, ext, -1);
	X509_EXTENSION_free(ext);
	ext = X509V3_EXT_conf_nid(NULL, &v3, NID_basic_constraints, "critical,CA:TRUE");
	X509_add_ext(cert, ext, -1);
	X509_EXTENSION_free(ext);
	if (key == NULL || X509_sign(cert, key, EVP_sha256()) == 0)
	{
		ERR_print_errors_fp(stderr);
		exit(1);
	}
	for (int f = 0; f < 2; f++)
	{
		int			fd = mkstemp(files[f]);
		FILE	   *out = fd >= 0 ? fdopen(fd, "w") : NULL;

		if (out == NULL || !PEM_write_X509(out, cert) || fclose(out) != 0)
		{
			perror("test certificate");
			exit(1);
		}
	}
	srv->ctx = SSL_CTX_new(TLS_server_method());
	if (srv->ctx == NULL ||
		SSL_CTX_use_certificate(srv->ctx, cert) != 1 ||
		SSL_CTX_use_PrivateKey(srv->ctx, key) != 1)
	{
		ERR_print_errors_fp(stderr);
		exit(1);
	}
	SSL_CTX_set_alpn_select_cb(srv->ctx, alpn_cb, srv);
	X509_free(cert);
	EVP_PKEY_free(key);
}

/* engine_ready: is the engine's descriptor ready (something to do)? */
static bool
engine_ready(HttpEngine *engine)
{
	struct pollfd pfd = {.fd = http_engine_fd(engine), .events = POLLIN};

	return poll(&pfd, 1, 0) == 1;
}

/* the scheme request_init puts in URLs: "http", then "https" */
static const char *scheme = "http";

/* request_init: a POST of a small body to path on the test server. */
static void
request_init(HttpRequest *req, char *url, size_t urlsize, int port)
{
	static const char body[] = "{\"order\": 1}";

	memset(req, 0, sizeof(*req));
	snprintf(url, urlsize, "%s://127.0.0.1:%d/hook", scheme, port);
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

/*
 * settle_closed: after the server closed its connections, let the engine
 * see them go (as the relay's loop would).
 */
static void
settle_closed(HttpEngine *engine)
{
	for (int turn = 0; turn < 200 && !engine_ready(engine); turn++)
		usleep(1000);
	http_engine_perform(engine);
}

/*
 * answer_next: the server answers the next request with text (then 204s
 * again).
 */
static void
answer_next(const char *text, size_t len)
{
	next_answer = text;
	next_answer_len = len;
}

/*
 * test_old_curl_bugs: what libcurl before 8.1.0 gets wrong on reused
 * handles and connections (http.c's file header), on any libcurl.
 */
static void
test_old_curl_bugs(HttpEngine *engine)
{
	static const char with_header[] = "HTTP/1.1 204 No Content\r\nX-Seen: 1\r\n\r\n";
	static const char folded[] = "HTTP/1.1 204 No Content\r\n folded: x\r\n\r\n";
	static const char forged[] = "HTTP/1.1 500 Forged\r\nContent-Length: 0\r\n\r\n";
	static char leftovers[64 * 1024];
	HttpRequest req;
	char		url[64];
	size_t		len;
	int			before;
	int			fd;

	/* one connection from here on */
	server_close_all(&server);
	settle_closed(engine);

	/* bug 1: a folded first header after answers that stored headers */
	answer_next(with_header, sizeof(with_header) - 1);
	ok(one(engine, &req, server.port), "an answer with a header");
	request_init(&req, url, sizeof(url), server.port);
	answer_next(folded, sizeof(folded) - 1);
	is_int(run(engine, &req, 1), 1,
		   "then one whose first header line is folded is handed back (no use after free)");
	ok(one(engine, &req, server.port), "and the next request is answered 204");

	/* bug 2: an answer followed by more than libcurl reads at once */
	len = (size_t) snprintf(leftovers, sizeof(leftovers), "HTTP/1.1 304 Not Modified\r\n\r\n");
	while (len + sizeof(forged) < sizeof(leftovers))
	{
		memcpy(leftovers + len, forged, sizeof(forged) - 1);
		len += sizeof(forged) - 1;
	}
	request_init(&req, url, sizeof(url), server.port);
	answer_next(leftovers, len);
	ok(run(engine, &req, 1) == 1 && req.status == 304,
	   "a 304 followed by %zu bytes of forged answers", len);
	before = server.accepted;
	ok(one(engine, &req, server.port),
	   "the next request gets its own answer, not one left from before");
	is_int(server.accepted - before, 1, "over a new connection");

	/* bug 2: an answer written while the connection is idle */
	ok(one(engine, &req, server.port), "a request on the kept-alive connection");
	for (fd = 0; fd < MAX_CONNS && server.conns[fd] < 0; fd++)
		;
	ok(fd < MAX_CONNS, "the server has the connection");
	if (fd < MAX_CONNS)
		server_write(&server, fd, forged, sizeof(forged) - 1);
	for (int turn = 0; turn < 200 && !engine_ready(engine); turn++)
		usleep(1000);
	ok(engine_ready(engine), "an answer nobody asked for makes the engine ready");
	http_engine_perform(engine);
	before = server.accepted;
	ok(one(engine, &req, server.port),
	   "the next request gets its own answer, not the one written ahead");
	is_int(server.accepted - before, 1, "over a new connection");
}

/*
 * test_pool: one request at a time to each of ten origins (ports) in
 * turn, three rounds: the connections of the first round serve the
 * others, though only one request is ever in flight.
 */
static void
test_pool(HttpEngine *engine)
{
	HttpRequest req;
	int			before;
	int			good = 0;

	while (server.nlisten < MAX_LISTEN)
		server_listen(&server);
	server_close_all(&server);
	settle_closed(engine);
	before = server.accepted;
	for (int round = 0; round < 3; round++)
		for (int l = 0; l < server.nlisten; l++)
			good += one(engine, &req, server.ports[l]);
	is_int(good, 3 * MAX_LISTEN, "three rounds of a request to each of %d origins answered",
		   MAX_LISTEN);
	is_int(server.accepted - before, MAX_LISTEN,
		   "over one connection per origin, kept between rounds");
}

static void test_tls_identities(HttpEngine *engine, const char *ca);

/*
 * test_sweep: while a request is in flight, every transfer is run once a
 * second whatever its socket says (http.c's file header: HTTP/2 requests
 * libcurl 8.23 leaves unsent until their timeout).  The engine's timeout
 * brings the relay's wait back for it, the request is answered as usual
 * after it, and no sweep is made while nothing is in flight.
 */
static void
test_sweep(HttpEngine *engine)
{
	HttpRequest req;
	char		url[64];
	unsigned long before = http_engine_sweeps(engine);
	unsigned long after;
	long		longest = 0;
	bool		stopped = false;
	int			done = 0;
	struct timespec start,
				now;

	request_init(&req, url, sizeof(url), server.port);
	ok(http_engine_start(engine, &req), "a request the server holds 2.5 s is started");
	clock_gettime(CLOCK_MONOTONIC, &start);
	do
	{
		struct pollfd pfd = {.fd = http_engine_fd(engine), .events = POLLIN};
		long		t = http_engine_timeout(engine);

		if (t < 0 || t > longest)
			longest = (t < 0) ? 100000 : t;
		poll(&pfd, 1, (t < 0 || t > 50) ? 50 : (int) t);
		http_engine_perform(engine);
		if (http_engine_next_done(engine) != NULL)
			done++;
		clock_gettime(CLOCK_MONOTONIC, &now);
	} while (done == 0 &&
			 (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 < 2500);
	is_int(done, 0, "the server has not answered it yet");
	ok(longest <= 1000, "while it waits, the engine never asks for a wait over 1 s (%ld ms)",
	   longest);
	after = http_engine_sweeps(engine);
	ok(after - before >= 2, "and runs it at least twice in 2.5 s without an event (%lu sweeps)",
	   after - before);
	for (int turn = 0; turn < 5000 && done == 0; turn++)
	{
		struct pollfd pfd = {.fd = http_engine_fd(engine), .events = POLLIN};

		server_serve(&server);
		poll(&pfd, 1, 1);
		http_engine_perform(engine);
		if (http_engine_next_done(engine) != NULL)
			done++;
	}
	ok(done == 1 && req.result == CURLE_OK && req.status == 204,
	   "then the server answers and the request is handed back with its 204");
	after = http_engine_sweeps(engine);
	for (int turn = 0; turn < 30; turn++)
	{
		usleep(50000);
		http_engine_perform(engine);
		if (http_engine_timeout(engine) < 0)
			stopped = true;
	}
	is_int((long long) (http_engine_sweeps(engine) - after), 0,
		   "with nothing in flight, 1.5 s pass without a sweep");
	ok(stopped, "and the engine asks for no wakeup of its own then");
}

/*
 * test_tls: https against the test server speaking TLS (HTTP/1.1 only):
 * ALPN, waiting for a first connection, session resumption across
 * handles and across configure.
 */
static void
test_tls(HttpEngine *engine)
{
	char		ca[] = "/tmp/grelout-test-ca-XXXXXX";
	char		ca2[] = "/tmp/grelout-test-ca2-XXXXXX";
	HttpRequest reqs[8];
	char		urls[8][64];
	int			before;
	int			resumed;
	int			good;
	int			restarted;

	server_close_all(&server);
	settle_closed(engine);
	tls_setup(&server, ca, ca2);
	scheme = "https";
	http_engine_configure(engine, ca, false, NULL, 8);

	ok(one(engine, &reqs[0], server.ports[0]), "https: a request is answered 204");
	is_int(server.offered_h2, 1, "the client offered h2 by ALPN");
	is_int(reqs[0].http_version, CURL_HTTP_VERSION_1_1,
		   "and took HTTP/1.1, which the server chose");
	is_int(reqs[0].new_connections, 1, "it opened a connection");
	is_int(server.handshakes - server.resumed, 1, "with a full handshake");
	before = server.accepted;
	ok(one(engine, &reqs[0], server.ports[0]), "the next request is answered");
	is_int(reqs[0].new_connections + (server.accepted - before), 0,
		   "on the same connection");

	/* an origin not seen yet: the first connection's protocol is awaited */
	for (int i = 0; i < 8; i++)
		request_init(&reqs[i], urls[i], sizeof(urls[i]), server.ports[1]);
	is_int(run(engine, reqs, 8), 8,
		   "8 requests together to a new https origin (HTTP/1.1) all finish");
	good = 0;
	for (int i = 0; i < 8; i++)
		good += (reqs[i].result == CURLE_OK && reqs[i].status == 204 &&
				 reqs[i].http_version == CURL_HTTP_VERSION_1_1);
	is_int(good, 8, "all 8 answered 204 over HTTP/1.1");

	/* new connections, from other handles, resume the origin's session */
	server_close_all(&server);
	settle_closed(engine);
	for (int i = 0; i < 8; i++)
		request_init(&reqs[i], urls[i], sizeof(urls[i]), server.ports[0]);
	before = server.accepted;
	resumed = server.resumed;
	is_int(run(engine, reqs, 8), 8, "after the server closed them, 8 requests together finish");
	good = 0;
	for (int i = 0; i < 8; i++)
		good += (reqs[i].result == CURLE_OK && reqs[i].status == 204);
	is_int(good, 8, "all 8 answered 204");
	is_int(server.accepted - before, 8, "over 8 new connections (HTTP/1.1)");
	/*
	 * At least one: libcurl 7.88 gives each of them the origin's session,
	 * but a TLS 1.3 ticket may serve one connection only, and libcurl 8
	 * (17's to 19's roots) keeps as many tickets as the server sent.
	 */
	printf("# %d of 8 resumed\n", server.resumed - resumed);
	ok(server.resumed - resumed >= 1,
	   "new connections from other handles resume the session one handle got");

	/*
	 * connections the server closed with a TLS close alert, as nginx closes
	 * idle ones: a request sent on one is sent again on a new connection
	 */
	good = 0;
	restarted = 0;
	for (int i = 0; i < 10; i++)
	{
		server_close_all(&server);
		settle_closed(engine);
		good += one(engine, &reqs[0], server.ports[0]);
		restarted += reqs[0].restarted;
	}
	is_int(good, 10, "10 requests, each after the server closed the TLS connections, are answered");
	printf("# %d of them sent again on a new connection\n", restarted);

	/* configure again, same CA file: the sessions are kept */
	http_engine_configure(engine, ca, false, NULL, 8);
	server_close_all(&server);
	settle_closed(engine);
	resumed = server.resumed;
	ok(one(engine, &reqs[0], server.ports[0]), "after a configure, a request is answered");
	is_int(server.resumed - resumed, 1, "its new connection resumed the session (same CA file)");

	/* another CA file: a new share, no session of the old one resumed */
	http_engine_configure(engine, ca2, false, NULL, 8);
	server_close_all(&server);
	settle_closed(engine);
	resumed = server.resumed;
	before = server.handshakes;
	ok(one(engine, &reqs[0], server.ports[0]), "under another CA file, a request is answered");
	is_int(server.handshakes - before, 1, "over a new connection");
	is_int(server.resumed - resumed, 0, "with a full handshake");
	test_tls_identities(engine, ca);
	unlink(ca);
	unlink(ca2);
}

/*
 * test_tls_identities: requests with a CA of their own (a client TLS
 * identity each, as a handler's tls_ca or certificate makes) get a
 * connection pool of their own (http.c, tls_share_for): an identity's
 * connection is kept between its requests, and the pool of the identity
 * least recently used goes, its connection closed, when a 33rd identity
 * comes.  In the engine's one pool (64 connections at least) all 33
 * connections would stay.  ca is a CA file of the server's certificate.
 */
static void
test_tls_identities(HttpEngine *engine, const char *ca)
{
#define IDENTITIES 33
	static char pem[IDENTITIES][4096];
	FILE	   *in = fopen(ca, "r");
	size_t		len = in ? fread(pem[0], 1, sizeof(pem[0]) - IDENTITIES - 1, in) : 0;
	HttpRequest req;
	char		url[64];
	int			before;
	int			good = 0;

	if (in)
		fclose(in);
	pem[0][len] = '\0';
	/* the same certificate, a text of its own: trailing newlines */
	for (int i = 1; i < IDENTITIES; i++)
	{
		memcpy(pem[i], pem[0], len);
		memset(pem[i] + len, '\n', i);
		pem[i][len + i] = '\0';
	}
	server_close_all(&server);
	settle_closed(engine);

	request_init(&req, url, sizeof(url), server.ports[0]);
	req.tls_ca = pem[0];
	ok(run(engine, &req, 1) == 1 && req.status == 204,
	   "a request with a CA of its own is answered");
	before = server.accepted;
	request_init(&req, url, sizeof(url), server.ports[0]);
	req.tls_ca = pem[0];
	ok(run(engine, &req, 1) == 1 && req.status == 204 && server.accepted == before,
	   "the next with the same CA reuses its connection");

	for (int i = 1; i < IDENTITIES; i++)
	{
		request_init(&req, url, sizeof(url), server.ports[0]);
		req.tls_ca = pem[i];
		good += (run(engine, &req, 1) == 1 && req.status == 204);
	}
	is_int(good, IDENTITIES - 1, "a request of each of %d more identities is answered",
		   IDENTITIES - 1);

	before = server.accepted;
	request_init(&req, url, sizeof(url), server.ports[0]);
	req.tls_ca = pem[IDENTITIES - 1];
	ok(run(engine, &req, 1) == 1 && req.status == 204 && server.accepted == before,
	   "the last identity's next request reuses its connection");
	request_init(&req, url, sizeof(url), server.ports[0]);
	req.tls_ca = pem[0];
	ok(run(engine, &req, 1) == 1 && req.status == 204,
	   "the first identity's next request is answered");
	is_int(server.accepted - before, 1,
		   "on a new connection: its pool went when the 33rd identity came");

	/*
	 * identities quiet for the idle limit (1 s here, 50 s in the relay):
	 * their pools go, their connections closed, with no request of theirs
	 */
	http_engine_set_idle_limit(engine, 1);
	request_init(&req, url, sizeof(url), server.ports[0]);
	req.tls_ca = pem[1];
	ok(run(engine, &req, 1) == 1 && req.status == 204,
	   "under an idle limit of 1 s, a request of another identity is answered");
	before = server_open(&server);
	for (int turn = 0; turn < 60; turn++)
	{
		usleep(50000);
		http_engine_perform(engine);
		server_serve(&server);
	}
	ok(before - server_open(&server) >= 32,
	   "3 s later the quiet identities' connections are closed (%d of %d open before)",
	   before - server_open(&server), before);
	before = server.accepted;
	request_init(&req, url, sizeof(url), server.ports[0]);
	req.tls_ca = pem[1];
	ok(run(engine, &req, 1) == 1 && req.status == 204 && server.accepted == before + 1,
	   "and the identity's next request is answered over a new connection");
	http_engine_set_idle_limit(engine, 50);
#undef IDENTITIES
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
	http_engine_configure(engine, NULL, false, NULL, 1);

	ok(one(engine, &reqs[0], server.port), "a request is answered 204");
	is_int(server.accepted, 1, "over one connection");

	/* the connection is kept alive: no change to the epoll set a request */
	good = 0;
	before = http_engine_watch_changes(engine);
	for (int i = 0; i < 50; i++)
		good += one(engine, &reqs[0], server.port);
	is_int(good, 50, "50 more requests, one after another, are answered");
	is_int(server.accepted, 1, "all on the kept-alive connection");
	is_int(reqs[0].new_connections, 0, "the last one says it opened no connection");
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

	test_sweep(engine);
	test_old_curl_bugs(engine);
	test_pool(engine);
	test_tls(engine);
	return done_testing();
}
