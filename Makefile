# grelout: PGXS build of the extension, its tests and tools.
#
#   make                  build grelout.so
#   make install          install it into the PostgreSQL found by pg_config
#   make installcheck     the regression, isolation and Perl TAP tests, as a
#                         non-root user, against the installed server, which
#                         must run with shared_preload_libraries = 'grelout'
#                         and grelout.database = 'contrib_regression'
#                         (PROVE_TESTS="test/t/020_delivery.pl ..." narrows
#                         the TAP tests; TAP_TESTS= skips them)
#   make test             the whole test suite (test/run), as root
#   make fuzz             the libFuzzer targets (fuzz/run)
#   make bench            the benchmark (bench/run) on PostgreSQL 15;
#                         make bench PG=17: on 17, in its Debian root
#   make chaos            the fault-injection soak (test/chaos/run)
#   make demo             the live demo (scripts/demo), as root
#   make dist             the PGXN release archive grelout-<version>.zip of
#                         HEAD (the version from META.json)

MODULE_big = grelout
OBJS = \
	src/grelout.o \
	src/hooks.o \
	src/shmem.o \
	src/ids.o \
	src/pure/edge.o \
	src/validate.o \
	src/pure/tls_pem.o \
	src/validate_auth.o \
	src/mask.o \
	src/pure/topic_pattern.o \
	src/pure/tracectx.o \
	src/pure/otlp.o \
	src/topic_pattern_sql.o \
	src/publish.o \
	src/capture.o \
	src/pure/sign.o \
	src/signing_key.o \
	src/spi_helpers.o \
	src/store.o \
	src/routing.o \
	src/claim.o \
	src/settle.o \
	src/health.o \
	src/handler_health.o \
	src/metrics.o \
	src/pure/outcome.o \
	src/pure/latency.o \
	src/webhook.o \
	src/pure/http.o \
	src/pure/budget.o \
	src/pure/limiter.o \
	src/pure/oauth.o \
	src/claim_budget.o \
	src/handler_auth.o \
	src/jobs.o \
	src/spans.o \
	src/claim_step.o \
	src/backlog.o \
	src/cycle.o \
	src/relay.o \
	src/pure/elastic.o \
	src/launcher.o \
	src/launcher_elastic.o \
	src/databases.o

EXTENSION = grelout
DATA = $(wildcard sql/*.sql)
PGFILEDESC = "grelout - transactional outbox with an in-server webhook relay"

# src/pure/: the files that know nothing of PostgreSQL (no postgres.h), which
# the unit tests, the fuzz targets and the benchmark's HTTP driver build alone.
PG_CPPFLAGS = -I$(srcdir)/src -I$(srcdir)/src/pure
SHLIB_LINK = -lcurl -lssl -lcrypto -lsodium

# PGXS knows no header dependencies: gcc writes each object's own (src/*.d,
# included after PGXS), so a changed header rebuilds every object that
# includes it; a struct whose layout changed under a stale object would only
# break at run time.  Set here, not after PGXS: its clean rule tests
# EXTRA_CLEAN as it is read.
EXTRA_CLEAN = $(OBJS:.o=.d)

# Tests, run by "make installcheck" against an installed, running server.
# They live under test/: the regression tests are test/sql/*.sql against
# test/expected/*.out, which PGXS runs in contrib_regression, the database
# the relays serve; the isolation specs are test/specs/*.spec (their expected
# output in test/expected/ too), run in isolation_regression, a database the
# relays do not serve.  So ordering_publish, which needs relays routing in its
# database (and prepared transactions), is left out here: it runs only in
# test/run's isolation suite, whose cluster serves it.  The outputs (results/,
# regression.diffs, output_iso/) go to the top of the tree, as PGXS has them.
# The Perl TAP tests start clusters of their own; PGXS skips them, saying so,
# when PostgreSQL was built without --enable-tap-tests.
REGRESS = $(sort $(basename $(notdir $(wildcard $(srcdir)/test/sql/*.sql))))
REGRESS_OPTS = --inputdir=$(srcdir)/test
REGRESS_PREP = installcheck-prep
ISOLATION = $(filter-out ordering_publish,$(sort $(basename $(notdir $(wildcard $(srcdir)/test/specs/*.spec)))))
ISOLATION_OPTS = --inputdir=$(srcdir)/test
TAP_TESTS = 1
PROVE_TESTS = test/t/*.pl

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# The PostgreSQL versions grelout builds on (src/compat.h holds their
# differences, and says the same with an #error for a build without make).
ifeq ($(filter 15 16 17 18 19,$(MAJORVERSION)),)
$(error grelout supports PostgreSQL 15 to 19 only; $(PG_CONFIG) is PostgreSQL $(or $(MAJORVERSION),unknown))
endif

# After PGXS, which sets it: prove finds GreloutTest.pm in test/lib.
# (PROVE_FLAGS stays free for the caller, e.g. PROVE_FLAGS=--verbose.)
PG_PROVE_FLAGS += -I $(srcdir)/test/lib

# (CFLAGS, not PG_CFLAGS, which test/run sets on the command line; gcc only:
# the bitcode compile would write the same files)
override CFLAGS += -MMD -MP
-include $(OBJS:.o=.d)

# installcheck-prep: pg_regress drops and creates its database; the relays
# connected to it leave before DROP DATABASE runs (and wait for it to exist
# again), so no FORCE is needed.  The TAP tests need Perl's IPC::Run.
.PHONY: installcheck-prep
installcheck-prep:
ifneq ($(strip $(TAP_TESTS)),)
ifeq ($(enable_tap_tests),yes)
	@perl -MIPC::Run -e 1 2>/dev/null || \
		{ echo 'the Perl TAP tests need IPC::Run (libipc-run-perl); or skip them: make installcheck TAP_TESTS='; exit 1; }
endif
endif

# dist: the PGXN release archive, git archive of HEAD (what is committed;
# .gitattributes leaves out what only git and CI use), every file under
# grelout-<version>/, the version read from META.json.  DIST names the
# archive's path (test/package/dist writes it elsewhere).
EXTVERSION = $(shell /usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["version"])' $(srcdir)/META.json)
DIST = $(EXTENSION)-$(EXTVERSION).zip
.PHONY: dist
dist:
	git -C $(srcdir) archive --format=zip --prefix=$(EXTENSION)-$(EXTVERSION)/ -o $(abspath $(DIST)) HEAD

.PHONY: test bench chaos fuzz demo
test:
	bash test/run
fuzz:
	bash fuzz/run
bench:
	bash bench/run $(if $(PG),--pg $(PG))
chaos:
	bash test/chaos/run
demo:
	bash scripts/demo
