/*-------------------------------------------------------------------------
 *
 * outcome.h
 *	  The outcome of one webhook attempt, decided from what the endpoint
 *	  answered (or did not), in plain C beside the other edge parsers.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRELOUT_OUTCOME_H
#define GRELOUT_OUTCOME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum OutcomeKind
{
	OUTCOME_DELIVERED,
	OUTCOME_RETRY,
	OUTCOME_DEAD
} OutcomeKind;

/* What one attempt produced, and the policy that applies to it. */
typedef struct OutcomeInput
{
	bool		responded;		/* a status line arrived */
	long		status;			/* its status code */
	bool		has_retry_after;
	int64_t		retry_after_ms;
	int			attempts;		/* this attempt's number, from 1 */
	int			max_attempts;
	bool		dead_letter;	/* grelout.dead_letter */
	int64_t		retry_base_ms;
	int64_t		retry_max_ms;
	double		retry_jitter;	/* 0 to 1 */
	double		draw;			/* a random number in [0, 1), drawn by the caller */
} OutcomeInput;

typedef struct Outcome
{
	OutcomeKind kind;
	int64_t		delay_ms;		/* OUTCOME_RETRY: when to try again */
} Outcome;

/*
 * What an attempt's outcome says about its endpoint: the breaker's input
 * (outcome_health).  Only OUTCOME_HEALTH_FAILURE counts toward the breaker
 * (and so toward auto-disable); OUTCOME_HEALTH_MESSAGE fails the one
 * delivery and leaves the handler's health as it was.
 */
typedef enum OutcomeHealth
{
	OUTCOME_HEALTH_SUCCESS,		/* 2xx */
	OUTCOME_HEALTH_FAILURE,		/* the endpoint or its credentials failed */
	OUTCOME_HEALTH_PAUSE,		/* 429 or 503 with Retry-After */
	OUTCOME_HEALTH_MESSAGE		/* a 4xx that a message's content can cause */
} OutcomeHealth;

extern Outcome outcome_decide(const OutcomeInput *in);
extern OutcomeHealth outcome_health(bool responded, long status,
									bool has_retry_after);
extern int64_t outcome_backoff_ms(int attempts, int64_t base_ms, int64_t max_ms,
								  double jitter, double draw);
extern size_t outcome_sanitize(const char *src, size_t len, char *dst, size_t cap);
extern size_t outcome_sanitize_text(const char *src, size_t len, char *dst,
									size_t cap, bool utf8);

/* Room for the longest outcome class, with its NUL. */
#define OUTCOME_CLASS_MAX	32
extern size_t outcome_class(int status, const char *error, size_t len,
							char *out, size_t cap);

#endif							/* GRELOUT_OUTCOME_H */
