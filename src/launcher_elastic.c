/*-------------------------------------------------------------------------
 *
 * launcher_elastic.c
 *	  Elastic relays, the launcher's half: at each turn, once the relays
 *	  are shared out, give a served database one relay more while one of
 *	  its relays is saturated, or retire its highest extra relay after a
 *	  quiet spell, as elastic_move (src/pure/elastic.c) decides from what
 *	  the relays' slots say.
 *
 * The launcher's view of a database (LauncherDb, launcher.h) carries what
 * it wants: want, the relays it asked for (0: grelout.workers), and when
 * it last added or retired one.  share_relays (launcher.c) gives the extra
 * relays after every database's minimum; reconcile starts them as any
 * other.  A relay retired here is told through its slot
 * (retire_requested) and its latch: it claims no more, finishes and
 * settles its requests and exits by itself (relay.c), and the launcher
 * neither stops it nor starts it again.  A launcher that starts while
 * extra relays run keeps them (elastic_adopt).
 *
 *-------------------------------------------------------------------------
 */
#include "launcher.h"

#include "elastic.h"
#include "shmem.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/timestamp.h"

/* Look at the elastic databases this often while one may change. */
#define ELASTIC_TICK_MS			1000

/*
 * elastic_adopt: once, at the launcher's first turn with the databases
 * read (dbs, ndbs): the extra relays an earlier launcher added, and that
 * still run, are kept (as if just added) rather than stopped.
 */
void
elastic_adopt(LauncherDb *dbs, int ndbs)
{
	int64		now = elastic_now();

	for (int i = 0; i < grelout_shared->nslots; i++)
	{
		GreloutRelaySlot *slot = &grelout_shared->slots[i];
		LauncherDb *d;
		int			relay;
		Oid			dboid;
		bool		live;

		SpinLockAcquire(&slot->mutex);
		relay = slot->relay;
		dboid = slot->dboid;
		live = (slot->state == SLOT_RUNNING || slot->state == SLOT_STARTING) &&
			!slot->retire_requested;
		SpinLockRelease(&slot->mutex);
		d = NULL;
		for (int k = 0; k < ndbs; k++)
			if (dbs[k].oid == dboid)
				d = &dbs[k];
		if (!live || d == NULL || relay <= grelout_workers || relay <= d->want)
			continue;
		d->want = Min(relay, Max(grelout_workers, grelout_max_workers));
		d->added_at = now;
	}
}

/*
 * elastic_look: what the slots say of database d's relays, for
 * elastic_move: whether each of its relays up to its target runs and none
 * is retiring (settled), whether one is saturated now, when one last was.
 */
static void
elastic_look(const LauncherDb *d, ElasticDb *e, int64 now)
{
	int			running = 0;

	e->settled = true;
	e->saturated = false;
	e->saturated_at = 0;
	for (int i = 0; i < grelout_shared->nslots; i++)
	{
		GreloutRelaySlot *slot = &grelout_shared->slots[i];
		int			state;
		int			relay;
		bool		retiring;
		bool		saturated;
		int64		saturated_at;

		if (slot->dboid != d->oid)
			continue;
		SpinLockAcquire(&slot->mutex);
		state = slot->state;
		relay = slot->relay;
		retiring = slot->retire_requested;
		saturated = slot->saturated;
		saturated_at = slot->saturated_at;
		SpinLockRelease(&slot->mutex);
		if (state == SLOT_FREE)
			continue;
		if (retiring && state != SLOT_EXITED)
			e->settled = false;
		if (state == SLOT_RUNNING && relay <= d->target && !retiring)
			running++;
		if (state == SLOT_RUNNING && saturated)
		{
			e->saturated = true;
			saturated_at = now;
		}
		e->saturated_at = Max(e->saturated_at, saturated_at);
	}
	if (running < d->target)
		e->settled = false;
}

/*
 * elastic_retire: ask relay n of database d, running, to retire (it claims
 * no more, finishes what it has in flight and exits: relay.c); false when
 * it does not run.
 */
static bool
elastic_retire(const LauncherDb *d, int n)
{
	for (int i = 0; i < grelout_shared->nslots; i++)
	{
		GreloutRelaySlot *slot = &grelout_shared->slots[i];
		int			procno = -1;

		if (slot->dboid != d->oid)
			continue;
		SpinLockAcquire(&slot->mutex);
		if (slot->relay == n && slot->state == SLOT_RUNNING)
		{
			slot->retire_requested = true;
			procno = slot->pgprocno;
		}
		SpinLockRelease(&slot->mutex);
		if (procno >= 0)
		{
			SetLatch(&GetPGProcByNumber(procno)->procLatch);
			return true;
		}
	}
	return false;
}

/*
 * elastic_turn: add a relay to, or retire one from, each served database
 * of dbs as elastic_move says (none in the databases of asides);
 * *timeout is shortened while a database may change.  Returns whether any
 * target changed (the relays are then shared out again).
 */
bool
elastic_turn(LauncherDb *dbs, int ndbs, const Oid *asides, int nasides,
			 long *timeout)
{
	int64		now = elastic_now();
	int			used = 0;
	bool		changed = false;

	for (int k = 0; k < ndbs; k++)
		used += dbs[k].target;
	for (int k = 0; k < ndbs; k++)
	{
		LauncherDb *d = &dbs[k];
		ElasticDb	e;

		if (!d->wanted || d->target == 0 ||
			launcher_in_oids(d->oid, asides, nasides))
			continue;
		memset(&e, 0, sizeof(e));
		e.minimum = grelout_workers;
		e.maximum = grelout_max_workers;
		e.relays = d->target;
		e.added_at = d->added_at;
		e.retired_at = d->retired_at;
		e.room = used < grelout_max_relays;
		elastic_look(d, &e, now);
		if (e.saturated || e.relays > e.minimum)
			*timeout = Min(*timeout, ELASTIC_TICK_MS);
		switch (elastic_move(&e, now))
		{
			case ELASTIC_ADD:
				d->want = d->target + 1;
				d->added_at = now;
				used++;
				changed = true;
				ereport(LOG,
						(errmsg("grelout adds relay %d to database \"%s\": its relays cannot keep up",
								d->want, d->name),
						 errdetail("A relay has had more due messages than room for them for %d ms; the database may have up to %d relays (grelout.max_workers).",
								   (int) (ELASTIC_SATURATED_US / 1000),
								   Max(grelout_workers, grelout_max_workers))));
				break;
			case ELASTIC_RETIRE:
				if (!elastic_retire(d, d->target))
					break;
				if (d->target > Max(grelout_workers, grelout_max_workers))
					ereport(LOG,
							(errmsg("grelout retires relay %d of database \"%s\": it is above grelout.max_workers",
									d->target, d->name)));
				else
					ereport(LOG,
							(errmsg("grelout retires relay %d of database \"%s\": its relays have had room to spare",
									d->target, d->name),
							 errdetail("No relay of the database has been saturated for %d s; it keeps at least %d relays (grelout.workers).",
									   (int) (ELASTIC_QUIET_US / USECS_PER_SEC),
									   grelout_workers)));
				d->want = d->target - 1;
				d->retired_at = now;
				changed = true;
				break;
			case ELASTIC_HOLD:
				break;
		}
	}
	return changed;
}
