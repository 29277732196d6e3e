/*-------------------------------------------------------------------------
 *
 * grelout.h
 *	  Declarations shared by the files of the grelout extension: settings,
 *	  waking the relays, ids, validation and the relays' entry points.
 *	  What one module alone uses lives in its own header (shmem.h, store.h,
 *	  spi_helpers.h, health.h, http.h, webhook.h, outcome.h, edge.h, sign.h,
 *	  budget.h; relay.h for the files of a relay).
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRELOUT_H
#define GRELOUT_H

#include "postgres.h"

#include "compat.h"

#include "access/htup.h"
#include "access/tupdesc.h"
#include "datatype/timestamp.h"
#include "utils/jsonb.h"
#include "utils/uuid.h"

#define GRELOUT_VERSION			"1.2"
#define GRELOUT_MAX_WORKERS		64
#define GRELOUT_MAX_RELAYS		1024
#define GRELOUT_LAST_ERROR_MAX	512		/* bytes of last_error kept */
#define GRELOUT_TOPIC_MAX		255		/* bytes of a topic */
#define GRELOUT_HANDLER_NAME_MAX	255	/* bytes of a handler name */

/* grelout.c: settings */
extern char *grelout_database;
extern char *grelout_role;
extern int	grelout_workers;		/* per database */
extern int	grelout_max_workers;	/* per database, while saturated */
extern int	grelout_max_relays;
extern bool grelout_relay_enabled;
extern int	grelout_poll_interval;	/* ms */
extern int	grelout_batch_size;
extern int	grelout_concurrency;
extern int	grelout_lease_duration; /* ms */
extern int	grelout_request_timeout;	/* ms */
extern int	grelout_max_attempts;
extern int	grelout_retry_base;		/* ms */
extern int	grelout_retry_max;		/* ms */
extern double grelout_retry_jitter;
extern bool grelout_dead_letter;
extern int	grelout_max_payload_size;	/* bytes */
extern char *grelout_ca_file;
extern char *grelout_traceparent;	/* the session's trace context (publish.c) */
extern char *grelout_tracestate;
extern char *grelout_otlp_endpoint;	/* OTLP/HTTP traces URL; "": no spans */
extern bool grelout_block_private_networks;
extern int	grelout_max_in_flight;	/* per handler, over all relays; 0: none */
extern int	grelout_breaker_threshold;
extern int	grelout_breaker_cooldown;	/* ms */
extern int	grelout_disable_after;	/* s; 0: never */
/* grelout.allowed_networks, parsed once by its check hook */
extern const struct EdgeCidrList *grelout_allowed_networks;

/* grelout.keep_delivered, parsed */
typedef enum GreloutKeepMode
{
	GRELOUT_KEEP_OFF,			/* delete on delivery */
	GRELOUT_KEEP_ON,			/* keep for good */
	GRELOUT_KEEP_WINDOW			/* keep for grelout_keep_window_ms */
} GreloutKeepMode;
extern GreloutKeepMode grelout_keep_mode;
extern int64 grelout_keep_window_ms;

/* grelout.log_attempts: which attempts go into grelout.attempts (1.2) */
typedef enum GreloutLogAttempts
{
	GRELOUT_LOG_ATTEMPTS_FAILED,	/* retried, dead and held attempts */
	GRELOUT_LOG_ATTEMPTS_ALL,	/* every attempt */
	GRELOUT_LOG_ATTEMPTS_OFF	/* none */
} GreloutLogAttempts;
extern int	grelout_log_attempts;	/* a GreloutLogAttempts */
extern int	grelout_attempt_body_max;	/* bytes of a response body logged */
extern int	grelout_keep_attempts;	/* s; 0: never purged */

extern bool grelout_loaded_at_preload;

/* shmem.c (the relays' slots are in shmem.h) */
extern void grelout_shmem_install_hooks(void);
extern void grelout_wake_relays(void);

/* ids.c */
extern void grelout_uuid7(pg_uuid_t *uuid);

/* validate.c */
extern void grelout_check_headers(Jsonb *headers, const char *what,
								  bool message_rules);
extern void grelout_check_topic(text *topic, const char *what);
extern int64 grelout_interval_usecs(const Interval *iv, const char *what);
extern void grelout_check_url(text *url, const char *what);

/* validate_auth.c */
extern void grelout_check_handler_auth(HeapTuple tuple, HeapTuple old,
									   TupleDesc desc);

/* publish.c */
extern void grelout_check_publish_topic(text *topic);
extern void grelout_publish_change(text *topic, Jsonb *payload, text *key,
								   Oid publisher);

/*
 * The search_path every statement of grelout runs under, whoever calls:
 * the SET clause of the extension's functions, grelout_pin_search_path for
 * the C entry points (spi_helpers.h), the relay's session (relay.c).
 */
#define GRELOUT_SEARCH_PATH		"pg_catalog, pg_temp"

/* relay.c */
extern PGDLLEXPORT void grelout_relay_main(Datum arg);

/* launcher.c */
extern void grelout_register_launcher(void);
extern const char *grelout_database_check(const char *value);
extern bool grelout_database_all(void);
extern bool grelout_am_relay(void);
extern PGDLLEXPORT void grelout_launcher_main(Datum arg);

/* databases.c */
extern void grelout_extension_created(void);

#endif							/* GRELOUT_H */
