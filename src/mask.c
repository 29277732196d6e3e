/*-------------------------------------------------------------------------
 *
 * mask.c
 *	  grelout._mask_url(url), the SQL face of edge_url_mask(): a handler URL
 *	  with its userinfo, query values and fragment masked, as the view
 *	  grelout.handlers_masked shows it.
 *
 *-------------------------------------------------------------------------
 */
#include "grelout.h"

#include "edge.h"
#include "fmgr.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(grelout_mask_url);

/* grelout_mask_url: _mask_url(url text) RETURNS text, strict, immutable. */
Datum
grelout_mask_url(PG_FUNCTION_ARGS)
{
	text	   *url = PG_GETARG_TEXT_PP(0);
	size_t		len = VARSIZE_ANY_EXHDR(url);
	char	   *out = palloc(EDGE_URL_MASK_SIZE(len));
	size_t		n = edge_url_mask(VARDATA_ANY(url), len, out);

	PG_RETURN_TEXT_P(cstring_to_text_with_len(out, (int) n));
}
