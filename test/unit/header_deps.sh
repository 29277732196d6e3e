#!/usr/bin/env bash
# test/unit/header_deps.sh: TAP.  A changed header rebuilds the objects that
# include it and no others (the Makefile has gcc write each object's
# dependencies; PGXS tracks none).  Run after a build of the tree: it asks
# make what it would do were src/pure/http.h (then src/pure/budget.h) new, and
# changes nothing.
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=$(make -n -C "$ROOT" -W src/pure/http.h 2>&1)

echo "1..6"
rebuilt() { grep -q -- "-o src/$1.o " <<<"$out"; }
if rebuilt webhook; then echo "ok 1 - webhook.o (http.h through webhook.h) is rebuilt"
else echo "not ok 1 - webhook.o (http.h through webhook.h) is rebuilt"; fi
if rebuilt relay; then echo "ok 2 - relay.o is rebuilt"
else echo "not ok 2 - relay.o is rebuilt"; fi
if ! rebuilt ids; then echo "ok 3 - ids.o (no http.h) is not rebuilt"
else echo "not ok 3 - ids.o (no http.h) is not rebuilt"; fi

# budget.h: the relay's files include it through relay.h
out=$(make -n -C "$ROOT" -W src/pure/budget.h 2>&1)
if rebuilt claim_budget; then echo "ok 4 - claim_budget.o (budget.h) is rebuilt"
else echo "not ok 4 - claim_budget.o (budget.h) is rebuilt"; fi
if rebuilt cycle; then echo "ok 5 - cycle.o (budget.h through relay.h) is rebuilt"
else echo "not ok 5 - cycle.o (budget.h through relay.h) is rebuilt"; fi
if ! rebuilt webhook; then echo "ok 6 - webhook.o (no budget.h) is not rebuilt"
else echo "not ok 6 - webhook.o (no budget.h) is not rebuilt"; fi
