/*-------------------------------------------------------------------------
 *
 * grelout.c
 *	  Entry point of the grelout library: the settings under the reserved
 *	  "grelout." prefix, and the set-up done when the library is loaded
 *	  (shared memory, the relay workers, the commit callback); the SQL
 *	  functions that check the preload and read keep_delivered.
 *
 *-------------------------------------------------------------------------
 */
#include "grelout.h"

#include <limits.h>
#include <unistd.h>

#include "edge.h"
#include "hooks.h"
#include "http.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

PG_MODULE_MAGIC;

/* Settings; see the README for what each one means. */
char	   *grelout_database = NULL;
char	   *grelout_role = NULL;
int			grelout_workers = 1;
int			grelout_max_workers = 1;
int			grelout_max_relays = 16;
bool		grelout_relay_enabled = true;
int			grelout_poll_interval = 1500;
int			grelout_batch_size = 100;
int			grelout_concurrency = 2000;
int			grelout_lease_duration = 30000;
int			grelout_request_timeout = 10000;
int			grelout_max_attempts = 10;
int			grelout_retry_base = 1000;
int			grelout_retry_max = 300000;
double		grelout_retry_jitter = 1.0;
bool		grelout_dead_letter = true;
int			grelout_max_payload_size = 1024 * 1024;
char	   *grelout_ca_file = NULL;
bool		grelout_block_private_networks = false;
int			grelout_max_in_flight = 0;
int			grelout_breaker_threshold = 5;
int			grelout_breaker_cooldown = 30000;
int			grelout_disable_after = 5 * 24 * 3600;
char	   *grelout_traceparent = NULL;
char	   *grelout_tracestate = NULL;
char	   *grelout_otlp_endpoint = NULL;
static char *grelout_allowed_networks_string = NULL;
static const EdgeCidrList no_networks = {0};
const EdgeCidrList *grelout_allowed_networks = &no_networks;

static char *grelout_keep_delivered = NULL;
GreloutKeepMode grelout_keep_mode = GRELOUT_KEEP_OFF;
int64		grelout_keep_window_ms = 0;

int			grelout_log_attempts = GRELOUT_LOG_ATTEMPTS_FAILED;
int			grelout_attempt_body_max = 4096;
int			grelout_keep_attempts = 7 * 24 * 3600;

static const struct config_enum_entry log_attempts_options[] = {
	{"failed", GRELOUT_LOG_ATTEMPTS_FAILED, false},
	{"all", GRELOUT_LOG_ATTEMPTS_ALL, false},
	{"off", GRELOUT_LOG_ATTEMPTS_OFF, false},
	{NULL, 0, false}
};

/* True in every process forked from a postmaster that preloaded us. */
bool		grelout_loaded_at_preload = false;

void		_PG_init(void);

PG_FUNCTION_INFO_V1(grelout_assert_preloaded);
PG_FUNCTION_INFO_V1(grelout_keeps_delivered);

/* The parsed form of grelout.keep_delivered, passed from check to assign. */
typedef struct KeepDeliveredExtra
{
	GreloutKeepMode mode;
	int64		window_ms;
} KeepDeliveredExtra;

/*
 * check_keep_delivered: accept "off", "on" (and the other boolean spellings)
 * or a positive interval such as '30 days'.
 */
static bool
check_keep_delivered(char **newval, void **extra, GucSource source)
{
	KeepDeliveredExtra parsed;
	KeepDeliveredExtra *result;
	bool		boolval;

	if (*newval == NULL || (*newval)[0] == '\0' ||
		parse_bool(*newval, &boolval))
	{
		parsed.mode = (*newval == NULL || (*newval)[0] == '\0' || !boolval) ?
			GRELOUT_KEEP_OFF : GRELOUT_KEEP_ON;
		parsed.window_ms = 0;
	}
	else
	{
		char		workbuf[256];
		char	   *field[MAXDATEFIELDS];
		int			ftype[MAXDATEFIELDS];
		int			nf;
		int			dtype = 0;
		int			dterr;
		struct pg_itm_in itm;
		Interval	iv;
		int64_t		usecs;

		dterr = ParseDateTime(*newval, workbuf, sizeof(workbuf), field, ftype,
							  MAXDATEFIELDS, &nf);
		if (dterr == 0)
			dterr = DecodeInterval(field, ftype, nf, INTERVAL_FULL_RANGE,
								   &dtype, &itm);
		if (dterr == DTERR_BAD_FORMAT)
			dterr = DecodeISO8601Interval(*newval, &dtype, &itm);
		if (dterr != 0 || dtype != DTK_DELTA || itmin2interval(&itm, &iv) != 0)
		{
			GUC_check_errmsg("invalid value for grelout.keep_delivered: \"%s\"", *newval);
			GUC_check_errhint("Use off, on, or an interval such as '7 days'.");
			return false;
		}
		if (!edge_interval_usecs(iv.month, iv.day, iv.time, &usecs))
		{
			GUC_check_errmsg("grelout.keep_delivered is out of range: \"%s\"", *newval);
			return false;
		}
		if (usecs <= 0)
		{
			GUC_check_errmsg("grelout.keep_delivered must be a positive interval");
			return false;
		}
		parsed.mode = GRELOUT_KEEP_WINDOW;
		parsed.window_ms = usecs / 1000;
	}

	result = (KeepDeliveredExtra *) grelout_guc_malloc(sizeof(KeepDeliveredExtra));
	if (result == NULL)
		return false;
	*result = parsed;
	*extra = result;
	return true;
}

/* assign_keep_delivered: publish the parsed value. */
static void
assign_keep_delivered(const char *newval, void *extra)
{
	KeepDeliveredExtra *parsed = (KeepDeliveredExtra *) extra;

	grelout_keep_mode = parsed->mode;
	grelout_keep_window_ms = parsed->window_ms;
}

/*
 * check_allowed_networks: a list of CIDRs separated by commas or spaces,
 * parsed here once into the setting's extra so that no reader parses the
 * string again.
 */
static bool
check_allowed_networks(char **newval, void **extra, GucSource source)
{
	EdgeCidrList *result;
	const char *bad;
	size_t		badlen;
	int			n;

	result = (EdgeCidrList *) grelout_guc_malloc(sizeof(EdgeCidrList));
	if (result == NULL)
		return false;
	n = edge_cidr_list_parse(*newval ? *newval : "", result->cidrs,
							 EDGE_CIDR_LIST_MAX, &bad, &badlen);
	if (n < 0)
	{
		EdgeCidr	one;

		grelout_guc_free(result);
		if (edge_cidr_parse(bad, badlen, &one))
			GUC_check_errmsg("grelout.allowed_networks lists more than %d networks",
							 EDGE_CIDR_LIST_MAX);
		else
			GUC_check_errmsg("invalid value for grelout.allowed_networks: \"%.*s\" is not a CIDR",
							 (int) Min(badlen, 64), bad);
		GUC_check_errhint("List up to %d networks such as '10.0.0.0/8, fd00::/8'.",
						  EDGE_CIDR_LIST_MAX);
		return false;
	}
	result->n = n;
	*extra = result;
	return true;
}

/* assign_allowed_networks: publish the parsed list. */
static void
assign_allowed_networks(const char *newval, void *extra)
{
	grelout_allowed_networks = extra ? (const EdgeCidrList *) extra : &no_networks;
}

/*
 * check_otlp_endpoint: empty (no span export), or an absolute http or
 * https URL with a host, as a handler's URL must be (edge_url_check).
 */
static bool
check_otlp_endpoint(char **newval, void **extra, GucSource source)
{
	if (*newval == NULL || (*newval)[0] == '\0' ||
		edge_url_check(*newval, strlen(*newval)) == EDGE_URL_OK)
		return true;
	GUC_check_errmsg("invalid value for grelout.otlp_endpoint: not an http or https URL with a host");
	GUC_check_errhint("Give the collector's full OTLP/HTTP traces URL, such as 'http://127.0.0.1:4318/v1/traces', or '' for no span export.");
	return false;
}

/*
 * check_database: one database name, a comma-separated list of them, or
 * "*" (every database with the extension).
 */
static bool
check_database(char **newval, void **extra, GucSource source)
{
	const char *error = grelout_database_check(*newval);

	if (error != NULL)
	{
		GUC_check_errmsg("invalid value for grelout.database: %s", error);
		GUC_check_errhint("Give a database name, a comma-separated list of names, or * for every database in which the extension is installed.");
		return false;
	}
	return true;
}

/*
 * Every grelout setting but the caller's trace context (grelout.traceparent,
 * grelout.tracestate) is shown to administrators only (SHOW,
 * current_setting, pg_settings): superusers and members of
 * pg_read_all_settings, as for PostgreSQL's own superuser-only settings.
 * A publisher has no use for them, and they say where the relays connect
 * and what they let through (grelout.allowed_networks, ca_file, role).
 */
#define ADMIN_ONLY	GUC_SUPERUSER_ONLY

/*
 * cpu_count: the processors online, the default of grelout.max_workers
 * (1 when the system does not say; at most GRELOUT_MAX_WORKERS).
 */
static int
cpu_count(void)
{
	long		n = sysconf(_SC_NPROCESSORS_ONLN);

	if (n < 1)
		return 1;
	return (int) Min(n, GRELOUT_MAX_WORKERS);
}

/*
 * define_settings: create every grelout.* setting with its default, range
 * and context, then reserve the prefix so a misspelt name is an error.
 */
static void
define_settings(void)
{
	DefineCustomStringVariable("grelout.database",
							   "Databases whose outbox the relays serve: a name, a comma-separated list, or * for every database with the extension.",
							   NULL, &grelout_database, "postgres",
							   PGC_SIGHUP, ADMIN_ONLY, check_database, NULL, NULL);
	DefineCustomStringVariable("grelout.role",
							   "Role the relays connect as; empty means the bootstrap superuser.",
							   NULL, &grelout_role, "",
							   PGC_POSTMASTER, ADMIN_ONLY, NULL, NULL, NULL);
	DefineCustomIntVariable("grelout.workers",
							"Number of relay processes per served database.",
							NULL, &grelout_workers, 1, 0, GRELOUT_MAX_WORKERS,
							PGC_SIGHUP, ADMIN_ONLY, NULL, NULL, NULL);
	DefineCustomIntVariable("grelout.max_workers",
							"Most relay processes per served database while grelout.workers cannot keep up.",
							"The launcher adds relays to a database while one of its relays is saturated, and retires them after a quiet spell; never fewer than grelout.workers.",
							&grelout_max_workers, cpu_count(), 1, GRELOUT_MAX_WORKERS,
							PGC_SIGHUP, ADMIN_ONLY, NULL, NULL, NULL);
	DefineCustomIntVariable("grelout.max_relays",
							"Most relay processes over all served databases.",
							NULL, &grelout_max_relays, 16, 1, GRELOUT_MAX_RELAYS,
							PGC_POSTMASTER, ADMIN_ONLY, NULL, NULL, NULL);
	DefineCustomBoolVariable("grelout.relay",
							 "Whether this server's relays claim and deliver messages.",
							 NULL, &grelout_relay_enabled, true,
							 PGC_SIGHUP, ADMIN_ONLY, NULL, NULL, NULL);
	DefineCustomIntVariable("grelout.poll_interval",
							"Fallback poll interval when nothing wakes a relay.",
							NULL, &grelout_poll_interval, 1500, 10, 3600 * 1000,
							PGC_SIGHUP, ADMIN_ONLY | GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("grelout.batch_size",
							"Most messages a relay claims at once, capped by free request slots.",
							NULL, &grelout_batch_size, 100, 1, 10000,
							PGC_SIGHUP, ADMIN_ONLY, NULL, NULL, NULL);
	DefineCustomIntVariable("grelout.concurrency",
							"Most requests in flight at once, per relay (a safety bound: each handler's own limit adapts).",
							NULL, &grelout_concurrency, 2000, 1, 10000,
							PGC_SIGHUP, ADMIN_ONLY, NULL, NULL, NULL);
	DefineCustomIntVariable("grelout.lease_duration",
							"How long a claimed message stays invisible to other relays.",
							NULL, &grelout_lease_duration, 30000, 1000, 24 * 3600 * 1000,
							PGC_SIGHUP, ADMIN_ONLY | GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("grelout.request_timeout",
							"Default timeout of one webhook request.",
							NULL, &grelout_request_timeout, 10000, 100, 3600 * 1000,
							PGC_SIGHUP, ADMIN_ONLY | GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("grelout.max_attempts",
							"Delivery attempts before a message is dead-lettered.",
							NULL, &grelout_max_attempts, 10, 1, 1000000,
							PGC_SIGHUP, ADMIN_ONLY, NULL, NULL, NULL);
	DefineCustomIntVariable("grelout.retry_base",
							"Base of the exponential retry backoff.",
							NULL, &grelout_retry_base, 1000, 1, 24 * 3600 * 1000,
							PGC_SIGHUP, ADMIN_ONLY | GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("grelout.retry_max",
							"Ceiling of the retry backoff.",
							NULL, &grelout_retry_max, 300000, 1, INT_MAX,
							PGC_SIGHUP, ADMIN_ONLY | GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomRealVariable("grelout.retry_jitter",
							 "Fraction of the backoff that is randomised (1 = full jitter).",
							 NULL, &grelout_retry_jitter, 1.0, 0.0, 1.0,
							 PGC_SIGHUP, ADMIN_ONLY, NULL, NULL, NULL);
	DefineCustomBoolVariable("grelout.dead_letter",
							 "Whether a message is dead-lettered after its last attempt; off retries forever.",
							 NULL, &grelout_dead_letter, true,
							 PGC_SIGHUP, ADMIN_ONLY, NULL, NULL, NULL);
	DefineCustomStringVariable("grelout.keep_delivered",
							   "Keep delivered rows: off, on, or an interval after which the relay purges them.",
							   NULL, &grelout_keep_delivered, "off",
							   PGC_SIGHUP, ADMIN_ONLY,
							   check_keep_delivered, assign_keep_delivered, NULL);
	DefineCustomIntVariable("grelout.max_payload_size",
							"Largest payload outbox_publish accepts, in bytes of JSON text.",
							NULL, &grelout_max_payload_size, 1024 * 1024, 1, 256 * 1024 * 1024,
							PGC_SUSET, ADMIN_ONLY | GUC_UNIT_BYTE, NULL, NULL, NULL);
	DefineCustomStringVariable("grelout.ca_file",
							   "CA bundle used to verify HTTPS endpoints; empty means the system CAs.",
							   NULL, &grelout_ca_file, "",
							   PGC_SIGHUP, ADMIN_ONLY, NULL, NULL, NULL);
	DefineCustomBoolVariable("grelout.block_private_networks",
							 "Refuse endpoints that resolve to loopback, private, link-local or unspecified addresses.",
							 NULL, &grelout_block_private_networks, false,
							 PGC_SIGHUP, ADMIN_ONLY, NULL, NULL, NULL);
	DefineCustomStringVariable("grelout.allowed_networks",
							   "Comma-separated CIDRs let through when private networks are blocked.",
							   NULL, &grelout_allowed_networks_string, "",
							   PGC_SIGHUP, ADMIN_ONLY,
							   check_allowed_networks, assign_allowed_networks, NULL);

	DefineCustomIntVariable("grelout.max_in_flight",
							"Default cap on one handler's requests in flight over all relays; 0 means the fair share only.",
							NULL, &grelout_max_in_flight, 0, 0, 100000,
							PGC_SIGHUP, ADMIN_ONLY, NULL, NULL, NULL);
	DefineCustomIntVariable("grelout.breaker_threshold",
							"Consecutive failed attempts that open a handler's circuit breaker; 0 means no breaker.",
							NULL, &grelout_breaker_threshold, 5, 0, 1000000,
							PGC_SIGHUP, ADMIN_ONLY, NULL, NULL, NULL);
	DefineCustomIntVariable("grelout.breaker_cooldown",
							"First wait of an open breaker before a probe; doubles on each failed probe up to grelout.retry_max.",
							NULL, &grelout_breaker_cooldown, 30000, 1, INT_MAX,
							PGC_SIGHUP, ADMIN_ONLY | GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("grelout.disable_after",
							"How long a breaker may stay open before its handler is disabled; 0 means never.",
							NULL, &grelout_disable_after, 5 * 24 * 3600, 0, INT_MAX,
							PGC_SIGHUP, ADMIN_ONLY | GUC_UNIT_S, NULL, NULL, NULL);
	DefineCustomEnumVariable("grelout.log_attempts",
							 "Which delivery attempts the relays write into grelout.attempts: failed, all or off.",
							 NULL, &grelout_log_attempts, GRELOUT_LOG_ATTEMPTS_FAILED,
							 log_attempts_options,
							 PGC_SIGHUP, ADMIN_ONLY, NULL, NULL, NULL);
	DefineCustomIntVariable("grelout.attempt_body_max",
							"Most bytes of a response body kept in grelout.attempts; 0 keeps none.",
							NULL, &grelout_attempt_body_max, 4096, 0, HTTP_BODY_READ_MAX,
							PGC_SIGHUP, ADMIN_ONLY | GUC_UNIT_BYTE, NULL, NULL, NULL);
	DefineCustomIntVariable("grelout.keep_attempts",
							"How long the relays keep the rows of grelout.attempts before purging them; 0 means for good.",
							NULL, &grelout_keep_attempts, 7 * 24 * 3600, 0, INT_MAX,
							PGC_SIGHUP, ADMIN_ONLY | GUC_UNIT_S, NULL, NULL, NULL);
	DefineCustomStringVariable("grelout.otlp_endpoint",
							   "OTLP/HTTP traces URL the relays export a span of each delivery attempt to; empty means none.",
							   NULL, &grelout_otlp_endpoint, "",
							   PGC_SIGHUP, ADMIN_ONLY, check_otlp_endpoint, NULL, NULL);

	/*
	 * The caller's trace context, for outbox_publish to record: any role
	 * sets it (SET LOCAL in a transaction) and sees its own value, so these
	 * two are not ADMIN_ONLY; they say nothing of the server.  Any value is
	 * taken: a malformed one is ignored at publish, never refused.
	 */
	DefineCustomStringVariable("grelout.traceparent",
							   "W3C traceparent of the caller, recorded with the messages it publishes.",
							   NULL, &grelout_traceparent, "",
							   PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomStringVariable("grelout.tracestate",
							   "W3C tracestate going with grelout.traceparent.",
							   NULL, &grelout_tracestate, "",
							   PGC_USERSET, 0, NULL, NULL, NULL);

	MarkGUCPrefixReserved("grelout");
}

/*
 * _PG_init: at server start (shared_preload_libraries), define the
 * settings, install the commit callback and the utility hooks, reserve
 * shared memory and register the launcher, which starts the relays; loaded
 * any other way, do nothing.
 *
 * A server that pg_upgrade runs (binary-upgrade mode, postgres -b) gets no
 * launcher, hence no relay: pg_upgrade reads the old cluster's catalogs and
 * builds the new one's while it holds them, and a relay there would claim,
 * send and settle messages (the old cluster's, after which the upgraded one
 * has them in another state) or write into a cluster being built.
 */
void
_PG_init(void)
{
	/*
	 * Loaded into one session only (LOAD, or CREATE EXTENSION without
	 * shared_preload_libraries): defining the restart settings now would be
	 * a FATAL error, so define nothing and let grelout_assert_preloaded say
	 * what to do.
	 */
	if (!process_shared_preload_libraries_in_progress)
		return;

	define_settings();

	grelout_loaded_at_preload = true;
	grelout_shmem_install_hooks();
	grelout_hooks_install();
	if (!IsBinaryUpgrade)
		grelout_register_launcher();
}

/*
 * grelout_assert_preloaded: called by the install script, so that
 * CREATE EXTENSION fails when the library was not preloaded; when it was,
 * the launcher hears of the new extension at commit.
 */
Datum
grelout_assert_preloaded(PG_FUNCTION_ARGS)
{
	if (!grelout_loaded_at_preload)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("grelout must be loaded via \"shared_preload_libraries\""),
				 errhint("Add grelout to shared_preload_libraries in postgresql.conf and restart the server.")));
	grelout_extension_created();
	PG_RETURN_VOID();
}

/*
 * grelout_keeps_delivered: grelout._keeps_delivered() RETURNS boolean.
 * Whether grelout.keep_delivered keeps delivered messages (on, or for a
 * window), as the relays read it.  The 1.1 handler triggers finalized a
 * fan-out message by it; those of 1.2 call grelout._finalize_fanout()
 * (settle.c), which reads the setting itself.  Kept for the 1.1 schema.
 */
Datum
grelout_keeps_delivered(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(grelout_keep_mode != GRELOUT_KEEP_OFF);
}
