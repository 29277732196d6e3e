/*-------------------------------------------------------------------------
 *
 * edge.h
 *	  Parsers and checks at grelout's network edge.  They depend on the C
 *	  library only, so the fuzz targets and unit tests link them alone.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRELOUT_EDGE_H
#define GRELOUT_EDGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <sys/socket.h>

#define GRELOUT_HEADER_NAME_MAX		256
#define GRELOUT_HEADER_VALUE_MAX	8192
#define GRELOUT_URL_MAX				2048
#define GRELOUT_SECRET_MIN_BYTES	24
#define GRELOUT_SECRET_MAX_BYTES	64
#define GRELOUT_ED25519_SEED_BYTES	32
#define GRELOUT_ED25519_PUBLIC_BYTES	32

/* Header names and values */
extern bool edge_header_name_valid(const char *name, size_t len);
extern bool edge_header_value_valid(const char *value, size_t len);
extern bool edge_header_name_reserved(const char *name, size_t len);
extern bool edge_header_name_message_reserved(const char *name, size_t len);
extern bool edge_header_value_blank(const char *value, size_t len);
extern bool edge_control_free(const char *s, size_t len, bool allow_htab);

/* URLs of handlers */
typedef enum EdgeUrlError
{
	EDGE_URL_OK = 0,
	EDGE_URL_TOO_LONG,
	EDGE_URL_BAD_SCHEME,
	EDGE_URL_NO_HOST,
	EDGE_URL_BAD_CHAR
} EdgeUrlError;
extern EdgeUrlError edge_url_check(const char *url, size_t len);
/* room edge_url_mask needs: each byte may become "***", plus a "***@" */
#define EDGE_URL_MASK_SIZE(len)		(3 * (len) + 4)
extern size_t edge_url_mask(const char *url, size_t len, char *out);

/* base64, Standard Webhooks secrets (whsec_) and signing keys (whsk_) */
extern size_t edge_base64_encode(const unsigned char *src, size_t len, char *dst);
extern long edge_base64_decode(const char *src, size_t len,
							   unsigned char *dst, size_t dstcap);

typedef enum EdgeSecretError
{
	EDGE_SECRET_OK = 0,
	EDGE_SECRET_NO_PREFIX,
	EDGE_SECRET_BAD_BASE64,
	EDGE_SECRET_BAD_LENGTH,
	EDGE_SECRET_KEY_MISMATCH	/* whsk_: the public half is not the seed's */
} EdgeSecretError;
extern EdgeSecretError edge_secret_decode(const char *secret, size_t len,
										  unsigned char *key, size_t *keylen);
extern EdgeSecretError edge_signing_key_decode(const char *key, size_t len,
											   unsigned char *seed,
											   unsigned char *public_key,
											   bool *has_public);

/* HTTP responses */
extern bool edge_status_line(const char *line, size_t len, int *status);
extern bool edge_header_line(const char *line, size_t len, const char *name,
							 const char **value, size_t *vlen);
extern bool edge_retry_after(const char *value, size_t len, time_t now,
							 int64_t *delay_ms);

/* Intervals: one overflow-checked conversion for every interval grelout takes */
extern bool edge_interval_usecs(int32_t months, int32_t days, int64_t usecs,
								int64_t *total);

/* Addresses of endpoints */
typedef enum EdgeAddrClass
{
	EDGE_ADDR_PUBLIC = 0,
	EDGE_ADDR_LOOPBACK,
	EDGE_ADDR_PRIVATE,
	EDGE_ADDR_LINK_LOCAL,
	EDGE_ADDR_MULTICAST,
	EDGE_ADDR_UNSPECIFIED,
	EDGE_ADDR_RESERVED
} EdgeAddrClass;
extern EdgeAddrClass edge_addr_class(const struct sockaddr *sa);
extern const char *edge_addr_class_name(EdgeAddrClass cls);

typedef struct EdgeCidr
{
	int			family;			/* AF_INET or AF_INET6 */
	unsigned char addr[16];
	int			prefix;
} EdgeCidr;
extern bool edge_cidr_parse(const char *text, size_t len, EdgeCidr *cidr);
extern bool edge_cidr_contains(const EdgeCidr *cidr, const struct sockaddr *sa);
extern int	edge_cidr_list_parse(const char *text, EdgeCidr *cidrs, int max,
								 const char **bad, size_t *badlen);

/* A parsed list of CIDRs, as grelout.allowed_networks holds at most. */
#define EDGE_CIDR_LIST_MAX	64
typedef struct EdgeCidrList
{
	int			n;
	EdgeCidr	cidrs[EDGE_CIDR_LIST_MAX];
} EdgeCidrList;

/*
 * grelout.database: one database name, a comma-separated list of them, or
 * "*".  A name is a span of the text, white space around it trimmed.
 */
#define EDGE_DATABASE_NAME_MAX	63	/* bytes: NAMEDATALEN - 1 */
#define EDGE_DATABASES_MAX		1024
typedef struct EdgeSpan
{
	const char *start;
	size_t		len;
} EdgeSpan;
extern int	edge_database_list(const char *text, EdgeSpan *names, int max,
							   const char **error);

#endif							/* GRELOUT_EDGE_H */
