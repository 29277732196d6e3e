/*-------------------------------------------------------------------------
 *
 * handler_auth.c
 *	  The relay's copy of its handlers' endpoint authentication (1.2), and
 *	  what it adds to each request of theirs as it starts:
 *
 *	- mutual TLS and a CA of their own: the PEM of tls_client_cert,
 *	  tls_client_key and tls_ca, handed to the HTTP engine (http.c);
 *	- OAuth2 client credentials (RFC 6749 section 4.4): an access token
 *	  from the handler's token URL, cached until shortly before it expires
 *	  (oauth.c's rule), sent as "Authorization: Bearer".  A request that
 *	  finds no valid token waits for one: the first starts a token request
 *	  through the same engine (its SSRF rules, TLS verified with
 *	  grelout.ca_file, not the handler's tls_ca, which is its endpoint's;
 *	  the request's timeout; never blocking another handler), and the others
 *	  wait for that one.  A token request that fails fails each waiting
 *	  request as a transport failure of the handler (retried, counted by
 *	  its breaker).  An answer 401 to a request with a token drops the
 *	  token and sends the request once more with a new one; a second 401
 *	  counts as any answer does.
 *
 * The copy is read again at every claim step, in the step's transaction,
 * after the claim and with a snapshot of its own (one statement that reads
 * the few handlers that have any of these columns set): a request is sent
 * with what its handler had when it was claimed or later, never earlier,
 * and a change reaches the requests claimed after it commits, as the rest
 * of the handler's row does.  A change of its oauth drops its token.  A
 * request takes its handler's certificate and CA as it is sent (after any
 * wait for a token), from the copy of that moment.
 *
 * Keys, client secrets and tokens are kept in the relay's memory only,
 * wiped when replaced, never written to a table, a log or an error.
 * libcurl copies the PEM a request uses as it starts.
 *
 *-------------------------------------------------------------------------
 */
#include "relay.h"

#include "catalog/pg_type.h"
#include "oauth.h"
#include "utils/hsearch.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

/* A token request in flight. */
typedef struct TokenFetch
{
	HttpRequest req;			/* first: the engine hands this back */
	char		name[GRELOUT_HANDLER_NAME_MAX + 1];	/* its handler */
	uint64		version;		/* of the handler's oauth it was made with */
	int64		sent_ms;		/* monotonic, when it started */
	char	   *url;
	char	   *body;
	struct curl_slist headers[4];
	char	   *basic;			/* the Authorization line: a secret */
	char		response[OAUTH_RESPONSE_MAX + 1];
} TokenFetch;

/* A handler's endpoint authentication, as the relay keeps it. */
typedef struct HandlerAuth
{
	char		name[GRELOUT_HANDLER_NAME_MAX + 1];	/* hash key */
	bool		present;		/* in the last read */
	char	   *tls_client_cert;	/* PEM, or NULL */
	char	   *tls_client_key;
	char	   *tls_ca;
	char	   *oauth;			/* the oauth object's text, or NULL */
	char	   *token_url;		/* its members */
	char	   *client_id;
	char	   *client_secret;
	char	   *scope;
	char	   *audience;
	uint64		version;		/* counts the changes of oauth */
	char	   *token_line;		/* "Authorization: Bearer ...", or NULL */
	int64		token_until_ms; /* monotonic: replace the token from then */
	TokenFetch *fetch;			/* its token request in flight, or NULL */
	WebhookJob *waiting;		/* requests waiting for a token (by next) */
} HandlerAuth;

/*
 * The handlers with any of the columns set; an enabled handler without
 * them is not read.  Columns 5 to 10: oauth, as text and by member.
 */
static const char *auth_sql =
"SELECT name, tls_client_cert, tls_client_key, tls_ca, oauth::text,"
"  oauth OPERATOR(pg_catalog.->>) 'token_url',"
"  oauth OPERATOR(pg_catalog.->>) 'client_id',"
"  oauth OPERATOR(pg_catalog.->>) 'client_secret',"
"  oauth OPERATOR(pg_catalog.->>) 'scope',"
"  oauth OPERATOR(pg_catalog.->>) 'audience'"
" FROM grelout.handlers"
" WHERE enabled AND (tls_client_cert IS NOT NULL OR tls_ca IS NOT NULL"
"  OR oauth IS NOT NULL)";

static SPIPlanPtr auth_plan = NULL;
static HTAB *auths = NULL;
static MemoryContext auth_cxt = NULL;
static HttpEngine *auth_engine = NULL;
static int	auth_waiting = 0;		/* requests waiting for a token, all handlers */

static WebhookJob *next_waiting(HandlerAuth *a);

/* forget_string: free a kept string, its bytes wiped first. */
static void
forget_string(char **s)
{
	if (*s == NULL)
		return;
	explicit_bzero(*s, strlen(*s));
	pfree(*s);
	*s = NULL;
}

/*
 * keep_column: *kept becomes column col of the row (NULL when NULL), in
 * auth_cxt; unchanged when it holds the same bytes already.  Returns
 * whether it changed.
 */
static bool
keep_column(char **kept, HeapTuple tup, TupleDesc desc, int col)
{
	char	   *value = grelout_text_column(tup, desc, col);

	if (value == NULL && *kept == NULL)
		return false;
	if (value != NULL && *kept != NULL && strcmp(value, *kept) == 0)
	{
		explicit_bzero(value, strlen(value));
		pfree(value);
		return false;
	}
	forget_string(kept);
	if (value != NULL)
	{
		*kept = MemoryContextStrdup(auth_cxt, value);
		explicit_bzero(value, strlen(value));
		pfree(value);
	}
	return true;
}

/* forget_oauth: a handler's oauth members and token, wiped. */
static void
forget_oauth(HandlerAuth *a)
{
	forget_string(&a->token_url);
	forget_string(&a->client_id);
	forget_string(&a->client_secret);
	forget_string(&a->scope);
	forget_string(&a->audience);
	forget_string(&a->token_line);
	a->version++;
}

/*
 * handler_auth_init: the engine token requests go through (the relay's,
 * at its start).
 */
void
handler_auth_init(HttpEngine *engine)
{
	HASHCTL		info;

	auth_engine = engine;
	auth_cxt = AllocSetContextCreate(TopMemoryContext, "grelout handler auth",
									 ALLOCSET_SMALL_SIZES);
	info.keysize = GRELOUT_HANDLER_NAME_MAX + 1;
	info.entrysize = sizeof(HandlerAuth);
	info.hcxt = auth_cxt;
	auths = hash_create("grelout handler auth", 16, &info,
						HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
}

/* keep_row: one handler's row of auth_sql into its HandlerAuth. */
static void
keep_row(HeapTuple tup, TupleDesc desc)
{
	char	   *name = grelout_text_column(tup, desc, 1);
	char		key[GRELOUT_HANDLER_NAME_MAX + 1];
	HandlerAuth *a;
	bool		found;

	memset(key, 0, sizeof(key));
	strlcpy(key, name, sizeof(key));
	a = hash_search(auths, key, HASH_ENTER, &found);
	if (!found)
		memset((char *) a + sizeof(a->name), 0, sizeof(HandlerAuth) - sizeof(a->name));
	a->present = true;
	keep_column(&a->tls_client_cert, tup, desc, 2);
	keep_column(&a->tls_client_key, tup, desc, 3);
	keep_column(&a->tls_ca, tup, desc, 4);
	if (keep_column(&a->oauth, tup, desc, 5))
	{
		/* new credentials: the token of the old ones is dropped */
		forget_oauth(a);
		if (a->oauth)
		{
			keep_column(&a->token_url, tup, desc, 6);
			keep_column(&a->client_id, tup, desc, 7);
			keep_column(&a->client_secret, tup, desc, 8);
			keep_column(&a->scope, tup, desc, 9);
			keep_column(&a->audience, tup, desc, 10);
		}
	}
}

/*
 * handler_auth_refresh: read the handlers' endpoint authentication again
 * (at a claim step, in its transaction).  Nothing on a schema without the
 * columns (before 1.2).
 */
void
handler_auth_refresh(void)
{
	HASH_SEQ_STATUS seq;
	HandlerAuth *a;
	int			ret;

	if (auths == NULL ||
		get_attnum(store_relid("handlers"), "oauth") == InvalidAttrNumber)
		return;

	grelout_keep_plan(&auth_plan, auth_sql, 0, NULL, 0);
	/* not read-only: a snapshot of its own, taken after the claim's */
	ret = SPI_execute_plan(auth_plan, NULL, NULL, false, 0);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "could not read the handlers' authentication: %s",
			 SPI_result_code_string(ret));

	hash_seq_init(&seq, auths);
	while ((a = hash_seq_search(&seq)) != NULL)
		a->present = false;
	for (uint64 i = 0; i < SPI_processed; i++)
		keep_row(SPI_tuptable->vals[i], SPI_tuptable->tupdesc);
	SPI_freetuptable(SPI_tuptable);

	/*
	 * A handler gone, disabled or without them now: its copy is wiped, and
	 * dropped unless a token request or requests waiting for it still
	 * refer to it.
	 */
	hash_seq_init(&seq, auths);
	while ((a = hash_seq_search(&seq)) != NULL)
	{
		if (a->present)
			continue;
		forget_string(&a->tls_client_cert);
		forget_string(&a->tls_client_key);
		forget_string(&a->tls_ca);
		if (a->oauth)
		{
			forget_string(&a->oauth);
			forget_oauth(a);
		}
		if (a->fetch == NULL && a->waiting == NULL)
			hash_search(auths, a->name, HASH_REMOVE, NULL);
	}
}

/*
 * set_bearer: the job's Authorization line, appended to its headers (or
 * replacing the one it had), in the job's memory.
 */
static void
set_bearer(WebhookJob *job, const char *line)
{
	if (job->bearer == NULL)
	{
		struct curl_slist **tail = &job->req.headers;

		while (*tail != NULL)
			tail = &(*tail)->next;
		job->bearer = MemoryContextAlloc(job->cxt, sizeof(struct curl_slist));
		job->bearer->next = NULL;
		*tail = job->bearer;
	}
	else
	{
		explicit_bzero(job->bearer->data, strlen(job->bearer->data));
		pfree(job->bearer->data);
	}
	job->bearer->data = MemoryContextStrdup(job->cxt, line);
}

/* fetch_free: a token request's memory, its secrets wiped. */
static void
fetch_free(TokenFetch *f)
{
	if (f->basic)
		forget_string(&f->basic);
	oauth_wipe(f->response, sizeof(f->response));
	if (f->body)
		pfree(f->body);
	if (f->url)
		forget_string(&f->url);
	pfree(f);
}

/*
 * start_fetch: a token request for a handler, with timeout_ms (its
 * requests').  False, with the reason in why, when it cannot start.
 */
static bool
start_fetch(HandlerAuth *a, long timeout_ms, char *why, size_t whylen)
{
	TokenFetch *f;
	size_t		n;

	/* the trigger refuses such a row; a relay never trusts that alone */
	if (a->token_url == NULL || a->client_id == NULL || a->client_secret == NULL)
	{
		snprintf(why, whylen, "OAuth token request not sent: the handler's oauth lacks token_url, client_id or client_secret");
		return false;
	}
	f = MemoryContextAllocZero(auth_cxt, sizeof(TokenFetch));
	strlcpy(f->name, a->name, sizeof(f->name));
	f->version = a->version;
	f->url = MemoryContextStrdup(auth_cxt, a->token_url);
	n = oauth_token_request_body(a->scope, a->audience, NULL, 0);
	f->body = MemoryContextAlloc(auth_cxt, n + 1);
	oauth_token_request_body(a->scope, a->audience, f->body, n + 1);
	n = oauth_basic_authorization(a->client_id, a->client_secret, NULL, 0);
	f->basic = MemoryContextAlloc(auth_cxt, n + sizeof("Authorization: "));
	memcpy(f->basic, "Authorization: ", sizeof("Authorization: ") - 1);
	oauth_basic_authorization(a->client_id, a->client_secret,
							  f->basic + sizeof("Authorization: ") - 1, n + 1);
	f->headers[0].data = "Content-Type: application/x-www-form-urlencoded";
	f->headers[1].data = "Accept: application/json";
	f->headers[2].data = "User-Agent: " GRELOUT_USER_AGENT;
	f->headers[3].data = f->basic;
	for (int i = 0; i < 3; i++)
		f->headers[i].next = &f->headers[i + 1];
	f->headers[3].next = NULL;

	f->req.url = f->url;
	f->req.headers = f->headers;
	f->req.body = f->body;
	f->req.body_len = strlen(f->body);
	f->req.timeout_ms = timeout_ms;
	f->req.purpose = HTTP_PURPOSE_TOKEN;
	f->req.body_keep = f->response;
	f->req.body_keep_size = sizeof(f->response);
	f->sent_ms = relay_now() / 1000;
	if (!http_engine_start(auth_engine, &f->req))
	{
		snprintf(why, whylen, "OAuth token request not sent: %s", f->req.errbuf);
		fetch_free(f);
		return false;
	}
	a->fetch = f;
	return true;
}

/*
 * fail_waiting: every request waiting for a's token fails with why, as a
 * transport failure of the handler.
 */
static void
fail_waiting(HandlerAuth *a, const char *why)
{
	WebhookJob *job;

	while ((job = next_waiting(a)) != NULL)
		jobs_fail_unsent(job, why);
}

/* find_auth: the copy of a job's handler, or NULL when it has none. */
static HandlerAuth *
find_auth(const WebhookJob *job)
{
	HandlerAuth *a;

	if (auths == NULL || job->handler == NULL || hash_get_num_entries(auths) == 0)
		return NULL;
	a = hash_search(auths, job->handler, HASH_FIND, NULL);
	return (a != NULL && a->present) ? a : NULL;
}

/*
 * handler_auth_tls: a job about to be sent gets its handler's certificate,
 * key and CA, as the copy has them now (libcurl copies them at once).
 */
void
handler_auth_tls(WebhookJob *job)
{
	HandlerAuth *a = find_auth(job);

	job->req.tls_client_cert = a ? a->tls_client_cert : NULL;
	job->req.tls_client_key = a ? a->tls_client_key : NULL;
	job->req.tls_ca = a ? a->tls_ca : NULL;
}

/* handler_auth_waiting: how many requests wait for a token. */
int
handler_auth_waiting(void)
{
	return auth_waiting;
}

/* wait_for_token: a job joins its handler's requests waiting for a token. */
static void
wait_for_token(HandlerAuth *a, WebhookJob *job)
{
	job->next = a->waiting;
	a->waiting = job;
	auth_waiting++;
}

/* next_waiting: the next job waiting for a's token, taken off the list. */
static WebhookJob *
next_waiting(HandlerAuth *a)
{
	WebhookJob *job = a->waiting;

	if (job == NULL)
		return NULL;
	a->waiting = job->next;
	job->next = NULL;
	auth_waiting--;
	return job;
}

/*
 * handler_auth_apply: give a job about to start its handler's OAuth2
 * token.  True: send it now.  False: it waits for a token
 * (handler_auth_token_done sends it, or fails it).
 */
bool
handler_auth_apply(WebhookJob *job)
{
	HandlerAuth *a = find_auth(job);
	char		why[HTTP_REFUSED_MAX];

	if (a == NULL || a->oauth == NULL)
		return true;

	if (a->token_line && relay_now() / 1000 < a->token_until_ms)
	{
		set_bearer(job, a->token_line);
		return true;
	}
	wait_for_token(a, job);
	if (a->fetch == NULL && !start_fetch(a, job->req.timeout_ms, why, sizeof(why)))
		fail_waiting(a, why);
	return false;
}

/*
 * handler_auth_unauthorized: a job answered 401: if it carried a token and
 * was not sent again for this yet, its handler's token (if still the one
 * it sent) is dropped and it is sent once more with a new token (true; it
 * may wait for the token).  Otherwise false: its answer counts.
 */
bool
handler_auth_unauthorized(WebhookJob *job)
{
	HandlerAuth *a;

	if (job->bearer == NULL || job->token_retried || job->req.status != 401 ||
		job->req.result != CURLE_OK)
		return false;
	a = find_auth(job);
	if (a == NULL || a->oauth == NULL)
		return false;
	job->token_retried = true;
	if (a->token_line && strcmp(a->token_line, job->bearer->data) == 0)
		forget_string(&a->token_line);
	if (handler_auth_apply(job))
		jobs_send(job);
	return true;
}

/*
 * handler_auth_token_done: a token request finished: its handler's token
 * kept and the waiting requests started, or the requests failed.
 */
void
handler_auth_token_done(HttpRequest *req)
{
	TokenFetch *f = (TokenFetch *) req;
	HandlerAuth *a = hash_search(auths, f->name, HASH_FIND, NULL);
	char		why[HTTP_REFUSED_MAX];
	OAuthToken *token = palloc(sizeof(OAuthToken));
	const char *bad = NULL;

	why[0] = '\0';
	if (req->status >= 200 && req->status < 300 &&
		(req->result == CURLE_OK || req->result == CURLE_WRITE_ERROR))
	{
		if (req->body_cut)
			bad = "longer than 64 kB";
		else
			bad = oauth_token_parse(f->response, req->body_keep_len, token);
		if (bad)
			snprintf(why, sizeof(why), "OAuth token response refused: %s", bad);
	}
	else if (req->status >= 100 && req->result == CURLE_OK)
	{
		char		code[OAUTH_ERROR_CODE_SIZE];

		if (oauth_error_parse(f->response, req->body_keep_len, code))
			snprintf(why, sizeof(why), "OAuth token request failed: HTTP %ld (%s)",
					 req->status, code);
		else
			snprintf(why, sizeof(why), "OAuth token request failed: HTTP %ld",
					 req->status);
	}
	else
	{
		char		err[HTTP_REFUSED_MAX];

		http_request_describe_error(req, err, sizeof(err));
		snprintf(why, sizeof(why), "OAuth token request failed: %s", err);
	}

	if (a != NULL)
	{
		if (a->fetch == f)
			a->fetch = NULL;
		if (!a->present || a->oauth == NULL)
			fail_waiting(a, "OAuth token not used: the handler's authentication changed while its requests waited");
		else if (a->version != f->version)
		{
			/* new credentials meanwhile: ask again with them */
			if (a->waiting && a->fetch == NULL &&
				!start_fetch(a, a->waiting->req.timeout_ms, why, sizeof(why)))
				fail_waiting(a, why);
		}
		else if (why[0] != '\0')
			fail_waiting(a, why);
		else
		{
			char	   *line = psprintf("Authorization: Bearer %s", token->access_token);
			WebhookJob *job;

			forget_string(&a->token_line);
			a->token_line = MemoryContextStrdup(auth_cxt, line);
			a->token_until_ms = oauth_refresh_at(f->sent_ms, token->has_expires_in,
												 token->expires_in_ms);
			while ((job = next_waiting(a)) != NULL)
			{
				set_bearer(job, line);
				jobs_send(job);
			}
			explicit_bzero(line, strlen(line));
			pfree(line);
		}
		if (!a->present && a->fetch == NULL && a->waiting == NULL)
			hash_search(auths, a->name, HASH_REMOVE, NULL);
	}
	oauth_wipe(token, sizeof(OAuthToken));
	pfree(token);
	fetch_free(f);
}
