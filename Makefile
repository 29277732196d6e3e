# grelout: PGXS build of the extension, its tests and tools.
#
#   make                  build grelout.so
#   make install          install it into the PostgreSQL found by pg_config
#   make test             the whole test suite (test/run), as root
#   make bench            the benchmark (bench/run)
#   make chaos            the fault-injection soak (test/chaos/run)

MODULE_big = grelout
OBJS = \
	src/grelout.o \
	src/shmem.o \
	src/ids.o \
	src/edge.o \
	src/validate.o \
	src/publish.o \
	src/sign.o \
	src/store.o \
	src/outcome.o \
	src/webhook.o \
	src/http.o \
	src/relay.o

EXTENSION = grelout
DATA = $(wildcard sql/grelout--*.sql)
PGFILEDESC = "grelout - transactional outbox with an in-server webhook relay"

PG_CPPFLAGS = -I$(srcdir)/src
SHLIB_LINK = -lcurl -lcrypto

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

.PHONY: test bench chaos fuzz demo
test:
	bash test/run
bench:
	bash bench/run
chaos:
	bash test/chaos/run
demo:
	bash scripts/demo
