/*-------------------------------------------------------------------------
 *
 * spi_helpers.h
 *	  What every statement grelout runs goes through (spi_helpers.c):
 *	  keeping a plan, the search_path it runs under, reading a column of a
 *	  row, the owner of a relation, arrays built from C values.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GRELOUT_SPI_HELPERS_H
#define GRELOUT_SPI_HELPERS_H

#include "grelout.h"

#include "access/htup.h"
#include "access/tupdesc.h"
#include "executor/spi.h"
#include "nodes/pg_list.h"

extern SPIPlanPtr grelout_keep_plan(SPIPlanPtr *plan, const char *sql,
									int nargs, Oid *argtypes,
									int cursor_options);
extern int	grelout_pin_search_path(void);
extern void grelout_unpin_search_path(int nest);

extern int	grelout_attnum(TupleDesc desc, const char *name, bool missing_ok);
extern char *grelout_text_column(HeapTuple tup, TupleDesc desc, int attnum);
extern Oid	grelout_relation_owner(Oid relid);

extern Oid	store_relid(const char *relname);
extern Datum store_array(Datum *elems, bool *nulls, int n, Oid type);
extern Datum store_text_array(List *strings);
extern Datum store_int_array(int *values, int n);

#endif							/* GRELOUT_SPI_HELPERS_H */
