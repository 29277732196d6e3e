/*-------------------------------------------------------------------------
 *
 * http_engine.c
 *	  Figure 13 of the benchmark: the relay's HTTP engine (src/pure/http.c, the
 *	  same file the relay is built from) alone, without PostgreSQL, sending
 *	  webhook-like POSTs to a URL with a fixed number of requests in flight.
 *	  It prints one JSON line: requests timed, seconds, CPU microseconds a
 *	  request (user + system, this process only: the receiver's CPU is its
 *	  own), and the changes the engine made to its epoll set.
 *
 *	  http_engine URL REQUESTS CONCURRENCY [BODY]
 *
 *	  BODY is the request body (bench.py passes figure 2's payload); without
 *	  it, about 200 bytes of JSON like it.
 *
 *	  The first tenth of the requests (connections opened, caches warm) is
 *	  not timed.  Any answer but 204 is an error (exit 1).
 *
 *-------------------------------------------------------------------------
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "http.h"

/* the webhook body of figure 2's messages: about 200 bytes of JSON */
static const char default_body[] =
"{\"type\": \"order.created\", \"order\": 12345678, \"customer\": 48213, "
"\"items\": [{\"sku\": \"A-1001\", \"qty\": 2}, {\"sku\": \"B-2002\", \"qty\": 1}], "
"\"total\": \"129.90\", \"currency\": \"EUR\", \"note\": \"leave at the door\"}";

/* cpu_seconds: user + system time of this process. */
static double
cpu_seconds(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
		ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

/* wall_seconds: the monotonic clock. */
static double
wall_seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int
main(int argc, char **argv)
{
	struct curl_slist *headers = NULL;
	HttpEngine *engine;
	HttpRequest *reqs;
	long		total;
	int			conc;
	long		warm;
	long		started = 0;
	long		done = 0;
	double		cpu0 = 0;
	double		wall0 = 0;
	unsigned long changes0 = 0;
	const char *body = default_body;

	if ((argc != 4 && argc != 5) || (total = atol(argv[2])) < 10 || (conc = atoi(argv[3])) < 1)
	{
		fprintf(stderr, "usage: %s URL REQUESTS(>= 10) CONCURRENCY [BODY]\n", argv[0]);
		return 2;
	}
	if (argc == 5)
		body = argv[4];
	warm = total / 10;
	/* the headers a relay sends (values of the same length) */
	headers = curl_slist_append(headers, "Content-Type: application/json");
	headers = curl_slist_append(headers, "User-Agent: grelout/1.1");
	headers = curl_slist_append(headers, "webhook-id: 01890a5d-ac96-774b-bcce-b302099a8057");
	headers = curl_slist_append(headers, "webhook-timestamp: 1700000000");
	headers = curl_slist_append(headers,
								"webhook-signature: v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4=");
	headers = curl_slist_append(headers, "grelout-topic: bench");
	headers = curl_slist_append(headers, "grelout-handler: bench");
	headers = curl_slist_append(headers, "grelout-attempt: 1");
	curl_global_init(CURL_GLOBAL_DEFAULT);
	engine = http_engine_create();
	reqs = calloc(conc, sizeof(HttpRequest));
	if (engine == NULL || reqs == NULL || headers == NULL)
	{
		fprintf(stderr, "out of memory\n");
		return 1;
	}
	http_engine_configure(engine, NULL, false, NULL, conc);
	for (int i = 0; i < conc && started < total; i++, started++)
	{
		reqs[i].url = argv[1];
		reqs[i].headers = headers;
		reqs[i].body = body;
		reqs[i].body_len = strlen(body);
		reqs[i].timeout_ms = 10000;
		if (!http_engine_start(engine, &reqs[i]))
		{
			fprintf(stderr, "could not start a request: %s\n", reqs[i].errbuf);
			return 1;
		}
	}
	while (done < total)
	{
		struct pollfd pfd = {.fd = http_engine_fd(engine), .events = POLLIN};
		long		t = http_engine_timeout(engine);
		HttpRequest *r;

		poll(&pfd, 1, (t < 0 || t > 100) ? 100 : (int) t);
		http_engine_perform(engine);
		while ((r = http_engine_next_done(engine)) != NULL)
		{
			if (r->result != CURLE_OK || r->status != 204)
			{
				char		err[512];

				http_request_describe_error(r, err, sizeof(err));
				fprintf(stderr, "request failed: status %ld, %s\n", r->status, err);
				return 1;
			}
			if (++done == warm)
			{
				cpu0 = cpu_seconds();
				wall0 = wall_seconds();
				changes0 = http_engine_watch_changes(engine);
			}
			if (started < total)
			{
				started++;
				if (!http_engine_start(engine, r))
				{
					fprintf(stderr, "could not start a request: %s\n", r->errbuf);
					return 1;
				}
			}
		}
	}
	printf("{\"requests\": %ld, \"seconds\": %.6f, \"cpu_us\": %.3f, \"watch_changes\": %lu}\n",
		   total - warm, wall_seconds() - wall0,
		   (cpu_seconds() - cpu0) * 1e6 / (total - warm),
		   http_engine_watch_changes(engine) - changes0);
	return 0;
}
