/*-------------------------------------------------------------------------
 *
 * cidr.c
 *	  libFuzzer target: grelout.allowed_networks parsing
 *	  (edge_cidr_list_parse, edge_cidr_parse) and the address checks the
 *	  relay makes at connect time (edge_cidr_contains, edge_addr_class).
 *
 * Invariants: an accepted CIDR is made of address characters only and
 * prints back (inet_ntop) to an address that parses to the same CIDR; its
 * prefix is within its family's width; a CIDR contains its own address; a
 * list never stores more than its room and, when it fails, points at a
 * piece of its own text.  Addresses made of input bytes are classified
 * without reading past them, and a mapped IPv6 address gets the class of
 * the IPv4 address it carries.
 *
 *-------------------------------------------------------------------------
 */
#include <arpa/inet.h>
#include <netinet/in.h>

#include "edge.h"
#include "fuzz.h"

#define ROOM 8

/* check_cidr: one accepted CIDR and the text it came from. */
static void
check_cidr(const EdgeCidr *c, const char *text, size_t len)
{
	char		buf[INET6_ADDRSTRLEN];
	EdgeCidr	again;
	struct sockaddr_storage ss;

	for (size_t i = 0; i < len; i++)
		CHECK(strchr("0123456789abcdefABCDEF.:/", text[i]) != NULL && text[i] != '\0');
	CHECK(c->family == AF_INET || c->family == AF_INET6);
	CHECK(c->prefix >= 0 && c->prefix <= (c->family == AF_INET ? 32 : 128));
	CHECK(inet_ntop(c->family, c->addr, buf, sizeof(buf)) != NULL);
	CHECK(edge_cidr_parse(buf, strlen(buf), &again));
	CHECK(again.family == c->family);
	CHECK(memcmp(again.addr, c->addr, c->family == AF_INET ? 4 : 16) == 0);

	memset(&ss, 0, sizeof(ss));
	if (c->family == AF_INET)
	{
		struct sockaddr_in *s4 = (struct sockaddr_in *) &ss;

		s4->sin_family = AF_INET;
		memcpy(&s4->sin_addr, c->addr, 4);
	}
	else
	{
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *) &ss;

		s6->sin6_family = AF_INET6;
		memcpy(&s6->sin6_addr, c->addr, 16);
	}
	CHECK(edge_cidr_contains(c, (struct sockaddr *) &ss));
}

/* check_addresses: classify addresses made of the input's first bytes. */
static void
check_addresses(const uint8_t *data, size_t size)
{
	struct sockaddr_in s4;
	struct sockaddr_in6 s6;
	struct sockaddr_in6 m6;
	EdgeAddrClass c4;

	if (size < 16)
		return;
	memset(&s4, 0, sizeof(s4));
	s4.sin_family = AF_INET;
	memcpy(&s4.sin_addr, data, 4);
	c4 = edge_addr_class((struct sockaddr *) &s4);
	CHECK(edge_addr_class_name(c4) != NULL);

	memset(&m6, 0, sizeof(m6));
	m6.sin6_family = AF_INET6;
	m6.sin6_addr.s6_addr[10] = 0xFF;
	m6.sin6_addr.s6_addr[11] = 0xFF;
	memcpy(&m6.sin6_addr.s6_addr[12], data, 4);
	CHECK(edge_addr_class((struct sockaddr *) &m6) == c4);

	memset(&s6, 0, sizeof(s6));
	s6.sin6_family = AF_INET6;
	memcpy(&s6.sin6_addr, data, 16);
	CHECK(edge_addr_class_name(edge_addr_class((struct sockaddr *) &s6)) != NULL);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char	   *exact = dup_exact(data, size);
	char	   *cstr = dup_cstring(data, size);
	EdgeCidr	one;
	EdgeCidr	list[ROOM];
	const char *bad = NULL;
	size_t		badlen = 0;
	int			n;

	if (edge_cidr_parse(exact, size, &one))
		check_cidr(&one, exact, size);

	n = edge_cidr_list_parse(cstr, list, ROOM, &bad, &badlen);
	if (n < 0)
	{
		CHECK(n == -1);
		CHECK(bad >= cstr && bad + badlen <= cstr + strlen(cstr));
		CHECK(badlen > 0);
	}
	else
		CHECK(n <= ROOM);

	check_addresses(data, size);
	free(exact);
	free(cstr);
	return 0;
}
