/*-------------------------------------------------------------------------
 *
 * spi_helpers.c
 *	  The helpers every statement grelout runs goes through, wherever it is
 *	  written (the relay's, publish.c's, the triggers'): a plan prepared
 *	  once and kept for the backend's life; the search_path pinned around a
 *	  call so that the caller's path decides nothing; a text column of a
 *	  row read as a C string; the owner of a relation, whose rights grelout
 *	  raises to; a relation of schema grelout by name; one-dimensional
 *	  arrays of C values, the parameters of the batched statements.
 *
 *-------------------------------------------------------------------------
 */
#include "spi_helpers.h"

#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"

/*
 * grelout_keep_plan: prepare sql the first time (*plan NULL), with the given
 * cursor options, keep it for the backend's life in *plan, and return it.
 * PostgreSQL revalidates a kept plan when the objects it uses change (ALTER
 * EXTENSION UPDATE included).
 */
SPIPlanPtr
grelout_keep_plan(SPIPlanPtr *plan, const char *sql, int nargs, Oid *argtypes,
				  int cursor_options)
{
	SPIPlanPtr	p;

	if (*plan != NULL)
		return *plan;
	p = SPI_prepare_cursor(sql, nargs, argtypes, cursor_options);
	if (p == NULL)
		elog(ERROR, "could not prepare grelout statement \"%s\": %s",
			 sql, SPI_result_code_string(SPI_result));
	if (SPI_keepplan(p) != 0)
		elog(ERROR, "could not keep grelout statement");
	*plan = p;
	return p;
}

/*
 * grelout_pin_search_path: run what follows, until grelout_unpin_search_path
 * with the value returned, under search_path GRELOUT_SEARCH_PATH whatever
 * the session's, as a function's SET search_path clause would
 * (fmgr_security_definer does the same).  Every SQL-callable function of
 * grelout that runs a statement or looks a name up calls it first: a kept
 * plan is analyzed again under the search_path of the moment it runs, so
 * pinning the path only while preparing would not do, and an operator or
 * function planted first on the caller's path would run with the rights
 * grelout raises to.
 *
 * Returns the GUC nest level to pass to grelout_unpin_search_path, or -1
 * when the path is that already (the function's own SET clause, an outer
 * pin, the relay's session) and nothing changed.  After an error nothing
 * needs undoing: the abort of the (sub)transaction restores the path.
 */
int
grelout_pin_search_path(void)
{
	int			nest;

	if (namespace_search_path != NULL &&
		strcmp(namespace_search_path, GRELOUT_SEARCH_PATH) == 0)
		return -1;
	nest = NewGUCNestLevel();
	(void) set_config_option("search_path", GRELOUT_SEARCH_PATH,
							 PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	return nest;
}

/*
 * grelout_unpin_search_path: give back the search_path that
 * grelout_pin_search_path replaced (nest: what it returned).
 */
void
grelout_unpin_search_path(int nest)
{
	if (nest >= 0)
		AtEOXact_GUC(true, nest);
}

/*
 * grelout_attnum: the attribute number of a row's column by name; when the
 * row has no such column, 0 if missing_ok (a column that an older installed
 * schema lacks), else an error.
 */
int
grelout_attnum(TupleDesc desc, const char *name, bool missing_ok)
{
	int			attnum = SPI_fnumber(desc, name);

	if (attnum > 0)
		return attnum;
	if (!missing_ok)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("column \"%s\" does not exist in this grelout schema", name),
				 errhint("Update the extension: ALTER EXTENSION grelout UPDATE.")));
	return 0;
}

/*
 * grelout_text_column: column attnum (1-based) of a row, of type text, as a
 * palloc'd C string; NULL when it is NULL, or when attnum is not a column
 * (SPI_fnumber's answer for a name the row does not have).
 */
char *
grelout_text_column(HeapTuple tup, TupleDesc desc, int attnum)
{
	bool		isnull;
	Datum		d;

	if (attnum <= 0 || attnum > desc->natts)
		return NULL;
	d = heap_getattr(tup, attnum, desc, &isnull);
	return isnull ? NULL : TextDatumGetCString(d);
}

/* grelout_relation_owner: the role that owns a relation. */
Oid
grelout_relation_owner(Oid relid)
{
	HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	Oid			owner;

	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for relation %u", relid);
	owner = ((Form_pg_class) GETSTRUCT(tup))->relowner;
	ReleaseSysCache(tup);
	return owner;
}

/*
 * store_relid: the OID of relation relname in schema grelout (an error when
 * it is missing: the schema is older than this library expects).
 */
Oid
store_relid(const char *relname)
{
	Oid			nsp = get_namespace_oid("grelout", false);
	Oid			rel = get_relname_relid(relname, nsp);

	if (!OidIsValid(rel))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation \"grelout.%s\" does not exist", relname),
				 errhint("Update the extension with ALTER EXTENSION grelout UPDATE.")));
	return rel;
}

/* store_array: a one-dimensional array of n datums of a type. */
Datum
store_array(Datum *elems, bool *nulls, int n, Oid type)
{
	int16		typlen;
	bool		typbyval;
	char		typalign;
	int			dims[1] = {n};
	int			lbs[1] = {1};

	get_typlenbyvalalign(type, &typlen, &typbyval, &typalign);
	return PointerGetDatum(construct_md_array(elems, nulls, 1, dims, lbs, type,
											  typlen, typbyval, typalign));
}

/* store_text_array: a text[] of the C strings of a list. */
Datum
store_text_array(List *strings)
{
	Datum	   *elems = palloc(sizeof(Datum) * Max(list_length(strings), 1));
	int			n = 0;
	ListCell   *lc;

	foreach(lc, strings)
		elems[n++] = CStringGetTextDatum((char *) lfirst(lc));
	return store_array(elems, NULL, n, TEXTOID);
}

/* store_int_array: an int4[] of n values. */
Datum
store_int_array(int *values, int n)
{
	Datum	   *elems = palloc(sizeof(Datum) * Max(n, 1));

	for (int i = 0; i < n; i++)
		elems[i] = Int32GetDatum(values[i]);
	return store_array(elems, NULL, n, INT4OID);
}
