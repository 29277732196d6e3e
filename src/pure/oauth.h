/*-------------------------------------------------------------------------
 *
 * oauth.h
 *	  OAuth2 client credentials (RFC 6749 section 4.4) at grelout's edge:
 *	  the token request's form body and Basic client authentication, the
 *	  token response and error response readers, and when a cached token
 *	  is to be refreshed.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRELOUT_OAUTH_H
#define GRELOUT_OAUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The longest access token taken, in bytes. */
#define OAUTH_TOKEN_MAX			16384
/* The longest token or error response read, in bytes. */
#define OAUTH_RESPONSE_MAX		65536
/* How deep arrays and objects may nest, the response's object counted. */
#define OAUTH_JSON_DEPTH_MAX	32
/* At most this many members in a response's object, their names this long in all. */
#define OAUTH_MEMBERS_MAX		64
#define OAUTH_MEMBER_NAMES_MAX	4096
/* The longest expires_in taken: ten years, in milliseconds. */
#define OAUTH_EXPIRES_MAX_MS	(INT64_C(10) * 365 * 24 * 3600 * 1000)
/* A token that came without expires_in is refreshed after this long. */
#define OAUTH_DEFAULT_LIFETIME_MS	(INT64_C(5) * 60 * 1000)
/* Refresh this long before expiry at most (and at most a tenth of the life). */
#define OAUTH_REFRESH_MARGIN_MS	(INT64_C(60) * 1000)
/* Room for an error code (RFC 6749 section 5.2) and its NUL. */
#define OAUTH_ERROR_CODE_MAX	64
#define OAUTH_ERROR_CODE_SIZE	(OAUTH_ERROR_CODE_MAX + 1)

/* A token response's content, as oauth_token_parse gives it. */
typedef struct OAuthToken
{
	char		access_token[OAUTH_TOKEN_MAX + 1];	/* NUL-terminated; a secret */
	size_t		access_token_len;
	bool		has_expires_in;
	int64_t		expires_in_ms;	/* > 0 when has_expires_in */
} OAuthToken;

/* The token request */
extern size_t oauth_form_encode(const char *s, size_t len, char *out, size_t cap);
extern size_t oauth_token_request_body(const char *scope, const char *audience,
									   char *out, size_t cap);
extern size_t oauth_basic_authorization(const char *client_id,
										const char *client_secret,
										char *out, size_t cap);

/* The responses */
extern const char *oauth_token_parse(const char *body, size_t len,
									 OAuthToken *token);
extern bool oauth_error_parse(const char *body, size_t len, char *code);
extern const char *oauth_number_ms(const char *s, size_t len, int64_t *ms);

/* The cache */
extern int64_t oauth_refresh_at(int64_t sent_ms, bool has_expires_in,
								int64_t expires_in_ms);

/* Wiping a token (or a request's Authorization value) before it is freed */
extern void oauth_wipe(void *p, size_t n);

#endif							/* GRELOUT_OAUTH_H */
