#!/usr/bin/python3
"""bench/bench.py: the figures of grelout's benchmark (issue 5).

Started by bench/run as the postgres OS user, once the cluster and nginx are
up; not meant to be run by hand.  Measures, against that cluster and nginx:

  1. publish overhead (pgbench: INSERT + outbox_publish vs INSERT + plain
     INSERT into a copy of grelout.outbox vs INSERT + graphile_worker.add_job,
     and an INSERT into a table captured by grelout.capture)
  2. delivery throughput of a backlog (grelout default and tuned, graphile-worker,
     and wrk as the HTTP ceiling)
  3. sustained rate (pgbench -R publishers while the relays deliver)
  4. commit-to-arrival latency at 50 msgs/s (timestamped by a receiver)
  5. throughput with 1M dead and 1M delayed rows in the table
  6. the relays' resident memory after 100k and 1M deliveries
  7. fan-out to 3 handlers against figure 2's single handler
  8. noisy neighbour: a healthy handler's drain and latency while another
     handler's endpoint hangs past the request timeout with a large backlog,
     against the same without it (and with the breaker off)
  9. per-key ordering: a backlog over 1,000 keys drained by an ordered
     handler against an unordered one, and the latency at 50 msgs/s
 10. grelout 1.0 (built from its commit into a copy of this PostgreSQL by
     bench/run, its own cluster) beside the current code: the figure 2 drain
 11. commit-to-arrival latency at 5,000 msgs/s sustained
 12. the figure 2 drain with a 100,000-message backlog of a topic with no
     handler, and of a topic whose handler is disabled, against without
 13. the relay's HTTP engine alone (bench/http_engine.c), beside wrk
 14. endpoint authentication (issue 34): the same drain over HTTPS to a
     handler signing with HMAC (v1), with ed25519 (v1a), with mutual TLS
     and with OAuth2 client credentials, interleaved run by run
 16. far (issue 32): the drain of a backlog to an endpoint that holds each
     POST 100 ms (nginx's echo module), default settings, beside wrk -c2000
     against it and graphile-worker at its defaults; the same over HTTPS
     (HTTP/2 by ALPN) beside wrk over HTTPS
 17. knee (issue 32): the drain to an endpoint that answers at most 300
     requests a second and queues the rest (nginx's limit_req)
 18. near (issue 32): the figure 2 drain at default settings against the
     same with grelout.max_workers = 1 (one relay), interleaved
 19. commit-to-arrival latency at 20 msgs/s (figure 4's at 50)

and writes WORK/results.md.  Exits non-zero only when the benchmark breaks.

Also the latency receiver, run as its own process:
  bench.py receiver PORT_FILE LOG_FILE [HANG_SECONDS]
(with HANG_SECONDS, figure 8's hanging endpoint: it answers each request
that many seconds late, and SIGUSR1 drops every request it holds).
"""
import argparse
import asyncio
import base64
import json
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid

import psycopg2

# One message body, about 200 bytes of JSON text once stored as jsonb.
PAYLOAD_FMT = ('{{"event":"order.created","order_id":{n},"customer_id":{c},'
               '"amount":"129.90","currency":"EUR","items":[{{"sku":"SKU-10293","qty":2}},'
               '{{"sku":"SKU-55120","qty":1}}],"note":"' + 'x' * 4 + '"}}')


def payload_sql(n_expr, c_expr):
    """The payload as a jsonb SQL expression built from two integer SQL expressions."""
    head, rest = PAYLOAD_FMT.split('{n}')
    mid, tail = rest.split('{c}')
    unq = lambda s: s.replace('{{', '{').replace('}}', '}').replace("'", "''")
    return ("('%s' || (%s) || '%s' || (%s) || '%s')::jsonb"
            % (unq(head), n_expr, unq(mid), c_expr, unq(tail)))


class Broken(Exception):
    """The benchmark itself cannot go on (not a matter of speed)."""


def log(msg):
    print('[bench %s] %s' % (time.strftime('%H:%M:%S'), msg), flush=True)


def stats(values):
    """median, min, max of a list of numbers."""
    return statistics.median(values), min(values), max(values)


def percentile(sorted_vals, p):
    """nearest-rank percentile of a sorted list."""
    if not sorted_vals:
        return float('nan')
    k = max(0, min(len(sorted_vals) - 1, int(-(-p * len(sorted_vals) // 100)) - 1))
    return sorted_vals[k]


# ---------------------------------------------------------------------------
# sizes
# ---------------------------------------------------------------------------
FULL = dict(
    runs=3,
    publish_runs=5,
    publish_seconds=8,
    backlog=100_000,
    graphile_backlog=15_000,
    wrk_seconds=5,
    latency_seconds=10,
    latency_rate=50,
    scale_rows=1_000_000,
    mem_first=100_000,
    mem_second=1_000_000,
    probe_seconds=8,
    confirm_seconds=60,
    ladder=(0.15, 0.3, 0.45, 0.6, 0.8),
    loaded_rate=5_000,
    idle_backlog=100_000,
    hang_backlog=20_000,
    engine_requests=200_000,
    auth_backlog=20_000,
    far_backlog=20_000,
    far_graphile=200,
    far_conns=2000,
    knee_backlog=6_000,
    near_backlog=100_000,
    latency_low_rate=20,
    log_backlog=50_000,
    log_runs=3,
)
QUICK = dict(
    runs=1,
    publish_runs=1,
    publish_seconds=2,
    backlog=2_000,
    graphile_backlog=500,
    wrk_seconds=2,
    latency_seconds=3,
    latency_rate=50,
    scale_rows=10_000,
    mem_first=2_000,
    mem_second=10_000,
    probe_seconds=3,
    confirm_seconds=5,
    ladder=(0.2, 0.4),
    loaded_rate=1_000,
    idle_backlog=2_000,
    hang_backlog=500,
    engine_requests=2_000,
    auth_backlog=1_000,
    far_backlog=1_000,
    far_graphile=20,
    far_conns=2000,
    knee_backlog=600,
    near_backlog=2_000,
    latency_low_rate=20,
    log_backlog=1_000,
    log_runs=2,
)

# Tuned relay settings (documented in results.md and the README).
TUNED = {
    'grelout.workers': '2',
    'grelout.concurrency': '100',
    'grelout.batch_size': '200',
}


class Bench:
    def __init__(self, args):
        self.a = args
        self.work = args.work
        self.quick = args.mode == 'quick'
        self.sz = dict(QUICK if self.quick else FULL)
        # for working on the harness: BENCH_SIZES / BENCH_TUNED (JSON) override
        self.sz.update(json.loads(os.environ.get('BENCH_SIZES') or '{}'))
        TUNED.update(json.loads(os.environ.get('BENCH_TUNED') or '{}'))
        self.nginx_url = 'http://127.0.0.1:%d' % args.nginx_port
        self.env = dict(os.environ, PGHOST=self.work, PGPORT=str(args.pgport),
                        PGDATABASE='bench', PGUSER='postgres')
        self.conn = None
        self.children = []
        self.res = {'figures': {}, 'load': [], 'notes': []}
        self.res['previous'] = previous_ratios(args.previous, args.pg_major)
        # another version's report (15's), which this run's figures are set beside
        self.res['baseline'] = report_figures(args.baseline)
        self.res['baseline_name'] = args.baseline_name
        self.t_start = time.time()
        self.workers = 1
        # the queue tables a drain vacuums (figure 10's 1.0 has no fanout)
        self.queue_tables = 'grelout.outbox, grelout.fanout'
        # called while pause() waits (figure 8: its hanging endpoint lets go)
        self.on_pause = None
        # nginx_status calls made, each one a connection nginx accepted
        self.status_calls = 0

    # -- plumbing ----------------------------------------------------------
    def connect(self):
        c = psycopg2.connect(host=self.work, port=self.a.pgport, dbname='bench',
                             user='postgres')
        c.autocommit = True
        return c

    def q(self, sql, args=None):
        """run one statement on the control connection; rows or None."""
        for attempt in range(3):
            try:
                if self.conn is None or self.conn.closed:
                    self.conn = self.connect()
                with self.conn.cursor() as cur:
                    cur.execute(sql, args)
                    return cur.fetchall() if cur.description else None
            except psycopg2.OperationalError:
                # the server restarted under us (restart_pg): reconnect once
                self.conn = None
                if attempt == 2:
                    raise
                time.sleep(1)

    def q1(self, sql, args=None):
        return self.q(sql, args)[0][0]

    def set_conf(self, **gucs):
        """ALTER SYSTEM SET each setting, then reload."""
        for k, v in gucs.items():
            self.q('ALTER SYSTEM SET %s = %%s' % k.replace('__', '.'), (str(v),))
        self.q('SELECT pg_reload_conf()')

    def load_note(self, label):
        with open('/proc/loadavg') as f:
            la = f.read().split()[:3]
        self.res['load'].append((label, ' '.join(la)))

    def spawn(self, argv, **kw):
        p = subprocess.Popen(argv, env=kw.pop('env', self.env), **kw)
        self.children.append(p)
        return p

    def stop_child(self, p, sig=signal.SIGTERM, timeout=20):
        if p.poll() is None:
            p.send_signal(sig)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if p in self.children:
            self.children.remove(p)

    def stop_all(self):
        for p in list(self.children):
            self.stop_child(p, timeout=5)

    def elapsed(self):
        return time.time() - self.t_start

    # -- relays ------------------------------------------------------------
    def relays(self):
        return self.q("SELECT relay, pid, activity, in_flight, delivered, retried,"
                      " dead_lettered FROM grelout.relays WHERE pid IS NOT NULL"
                      " ORDER BY relay")

    def relay_counts(self):
        """(delivered, retried + dead-lettered) by every relay process seen
        so far, each at the most it reported: with elastic relays an extra one
        may retire, or its slot be taken by a new one counting from 0, between
        two reads, and a sum of grelout.relays would fall back."""
        seen = self.__dict__.setdefault('_relay_counts', {})
        for relay, pid, delivered, failed in self.q(
                "SELECT relay, pid, delivered, retried + dead_lettered"
                " FROM grelout.relays WHERE pid IS NOT NULL"):
            d0, f0 = seen.get((relay, pid), (0, 0))
            seen[(relay, pid)] = (max(d0, delivered), max(f0, failed))
        return (sum(d for d, _ in seen.values()), sum(f for _, f in seen.values()))

    def delivered(self):
        return self.relay_counts()[0]

    def wait_relays(self, n, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.q1("SELECT count(*) FROM pg_stat_activity"
                       " WHERE backend_type = 'grelout relay'") == n and \
                    len(self.relays()) == n:
                return
            time.sleep(0.2)
        raise Broken('expected %d relays, got %s' % (n, self.relays()))

    def pause(self):
        """grelout.relay = off, and wait until every relay says so (while
        figure 8 runs, its hanging endpoint drops the requests it holds, so
        that a pause does not wait for their timeouts)."""
        self.set_conf(grelout__relay='off')
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.on_pause is not None:
                self.on_pause()
            rows = self.relays()
            if rows and all(r[2].startswith('paused') and r[3] == 0 for r in rows):
                return
            time.sleep(0.05)
        raise Broken('relays did not pause: %s' % (self.relays(),))

    def restart_pg(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        subprocess.run([os.path.join(self.a.pgbin, 'pg_ctl'), '-D', self.a.pgdata,
                        '-m', 'fast', '-w', '-t', '60', 'restart', '-l',
                        os.path.join(self.work, 'postgres.log')],
                       check=True, stdout=subprocess.DEVNULL, env=self.env)

    def nginx_requests(self):
        return self.nginx_status()[1]

    def nginx_status(self):
        """nginx's counters over all its servers: (connections accepted,
        requests); each call is a connection of its own (status_calls)."""
        self.status_calls += 1
        with urllib.request.urlopen(self.nginx_url + '/nginx_status', timeout=5) as r:
            text = r.read().decode()
        accepts, _, requests = text.splitlines()[2].split()[:3]
        return int(accepts), int(requests)

    def cpu_ticks(self):
        """CPU time (user + system, clock ticks) of the relays (in all, and each
        in 'relay_each') and of nginx's workers."""
        relays = [pid for (pid,) in self.q("SELECT pid FROM pg_stat_activity"
                                           " WHERE backend_type = 'grelout relay'")]
        out = {'relay': 0, 'nginx': 0, 'relay_each': {}}
        for pid in relays:
            out['relay_each'][pid] = self.ticks_of(pid)
            out['relay'] += out['relay_each'][pid]
        for d in os.listdir('/proc'):
            if d.isdigit():
                try:
                    with open('/proc/%s/cmdline' % d, 'rb') as f:
                        if not f.read().startswith(b'nginx: worker'):
                            continue
                except OSError:
                    continue
                out['nginx'] += self.ticks_of(int(d))
        return out, relays

    @staticmethod
    def ticks_of(pid):
        try:
            with open('/proc/%d/stat' % pid) as f:
                fields = f.read().rsplit(')', 1)[1].split()
            return int(fields[11]) + int(fields[12])
        except OSError:
            return 0

    def rss(self):
        """VmRSS, RssAnon, RssShmem (kB) of each relay: {pid: {...}}."""
        out = {}
        for (pid,) in self.q("SELECT pid FROM pg_stat_activity"
                             " WHERE backend_type = 'grelout relay' ORDER BY pid"):
            d = {}
            with open('/proc/%d/status' % pid) as f:
                for line in f:
                    k, _, v = line.partition(':')
                    if k in ('VmRSS', 'RssAnon', 'RssFile', 'RssShmem', 'VmHWM'):
                        d[k] = int(v.split()[0])
            out[pid] = d
        return out

    # -- setup ---------------------------------------------------------------
    def setup(self):
        self.q('CREATE EXTENSION grelout')
        if os.environ.get('BENCH_PGSS'):
            self.q('CREATE EXTENSION pg_stat_statements')
        self.q('CREATE TABLE bench_orders (id bigserial PRIMARY KEY,'
               ' customer_id int NOT NULL, amount numeric(12,2) NOT NULL,'
               ' status text NOT NULL, created_at timestamptz NOT NULL DEFAULT now())')
        self.q('CREATE TABLE bench_plain_outbox (LIKE grelout.outbox INCLUDING ALL)')
        # figure 1's captured table: bench_orders' columns, its changes published
        self.q('CREATE TABLE bench_captured (id bigserial PRIMARY KEY,'
               ' customer_id int NOT NULL, amount numeric(12,2) NOT NULL,'
               ' status text NOT NULL, created_at timestamptz NOT NULL DEFAULT now())')
        self.q("SELECT grelout.capture('bench_captured')")
        self.q("INSERT INTO grelout.handlers (topic, url) VALUES ('bench', %s)",
               (self.nginx_url + '/hook',))
        # fan-out (1.1): three handlers of topic fan, on three receiver paths
        for i in (1, 2, 3):
            self.q("INSERT INTO grelout.handlers (name, topic, url) VALUES (%s, 'fan', %s)",
                   ('fan-%d' % i, self.nginx_url + '/fan%d' % i))
        self.payload_len = self.res['payload_len'] = self.q1('SELECT length(%s::text)' % payload_sql('12345678', '48213'))
        log('payload: %d bytes of JSON text' % self.payload_len)
        self.node_env = dict(self.env, TARGET_URL=self.nginx_url + '/graphile',
                             CONCURRENCY='50')
        self.node(['migrate'])
        self.wait_relays(1)

    def node(self, argv, capture=False, env=None):
        r = subprocess.run(['node', os.path.join(self.work, 'bench/graphile/worker.mjs')] + argv,
                           env=env or self.node_env, check=False,
                           stdout=subprocess.PIPE if capture else None)
        if r.returncode != 0:
            raise Broken('graphile-worker %s failed (exit %d)' % (argv, r.returncode))
        return r.stdout.decode() if capture else None

    def reset_tables(self):
        """empty every table the figures write (relays must be paused)."""
        self.q('TRUNCATE bench_orders, bench_plain_outbox, bench_captured, grelout.outbox,'
               ' grelout.fanout, graphile_worker._private_jobs,'
               ' graphile_worker._private_job_queues RESTART IDENTITY')
        self.q('VACUUM ANALYZE bench_orders, bench_plain_outbox, bench_captured, grelout.outbox')
        self.q('CHECKPOINT')

    # -- figure 1 ------------------------------------------------------------
    def pgbench(self, script_text, name, seconds, clients=4, rate=None):
        path = os.path.join(self.work, name + '.pgbench')
        with open(path, 'w') as f:
            f.write(script_text)
        argv = ['pgbench', '-n', '-M', 'prepared', '-c', str(clients), '-j',
                str(min(2, clients)), '-T', str(seconds), '-f', path]
        if rate is not None:
            argv += ['-R', '%.1f' % rate]
        return argv

    @staticmethod
    def parse_pgbench(out):
        m = re.search(r'tps = ([0-9.]+) \(without initial connection time\)', out)
        n = re.search(r'number of transactions actually processed: (\d+)', out)
        if not m or not n:
            raise Broken('could not read pgbench output:\n' + out)
        return float(m.group(1)), int(n.group(1))

    def run_pgbench(self, argv):
        r = subprocess.run(argv, env=self.env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT)
        out = r.stdout.decode()
        if r.returncode != 0:
            raise Broken('pgbench failed:\n' + out)
        return self.parse_pgbench(out)

    def fig1(self):
        log('figure 1: publish overhead (pgbench, 4 clients, %d s a run)'
            % self.sz['publish_seconds'])
        self.load_note('fig 1 start')
        self.pause()
        payload = payload_sql(':n', ':c')
        biz = ("\\set n random(1, 100000000)\n\\set c random(1, 100000)\n"
               "BEGIN;\nINSERT INTO bench_orders (customer_id, amount, status)"
               " VALUES (:c, 129.90, 'created');\n")
        # a time-ordered uuid for the plain table too, as UUIDv7 is for grelout
        plain_id = ("(lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000000)::int8), 16, '0')"
                    " || substr(md5(random()::text), 1, 16))::uuid")
        variants = {
            'plain': biz + ("INSERT INTO bench_plain_outbox (id, topic, key, payload, headers,"
                            " available_at) VALUES (%s, 'orders', NULL, %s, '{}', now());\n"
                            % (plain_id, payload)) + 'COMMIT;\n',
            'grelout': biz + "SELECT outbox_publish('orders', %s);\n" % payload + 'COMMIT;\n',
            'graphile': biz + "SELECT graphile_worker.add_job('post', (%s)::json);\n" % payload
            + 'COMMIT;\n',
            # the business INSERT alone, into a captured table: its trigger
            # publishes the row (about the same size as the payload above)
            'capture': ("\\set c random(1, 100000)\nBEGIN;\n"
                        "INSERT INTO bench_captured (customer_id, amount, status)"
                        " VALUES (:c, 129.90, 'created');\nCOMMIT;\n"),
        }
        tps = {k: [] for k in variants}
        names = list(variants)
        capture_len = 0
        for run in range(self.sz['publish_runs']):
            # each round in a rotated order, so that no variant always goes first
            for name in names[run % len(names):] + names[:run % len(names)]:
                script = variants[name]
                self.reset_tables()
                t, n = self.run_pgbench(self.pgbench(script, 'fig1_' + name,
                                                     self.sz['publish_seconds']))
                rows = {'plain': 'SELECT count(*) FROM bench_plain_outbox',
                        'grelout': 'SELECT count(*) FROM grelout.outbox',
                        'graphile': 'SELECT count(*) FROM graphile_worker.jobs',
                        'capture': 'SELECT count(*) FROM grelout.outbox'}[name]
                stored = self.q1(rows)
                if stored != n:
                    raise Broken('figure 1 %s: %d transactions but %d rows' % (name, n, stored))
                if name == 'capture':
                    capture_len = int(self.q1('SELECT avg(length(payload::text))'
                                              ' FROM grelout.outbox'))
                tps[name].append(t)
                log('  run %d %-8s %8.0f tps' % (run + 1, name, t))
        self.reset_tables()
        self.res['figures']['1'] = {
            'tps': tps,
            'ratio_grelout': [g / p for g, p in zip(tps['grelout'], tps['plain'])],
            'ratio_graphile': [g / p for g, p in zip(tps['graphile'], tps['plain'])],
            'ratio_capture': [c / p for c, p in zip(tps['capture'], tps['plain'])],
            'capture_payload_len': capture_len,
            'scripts': variants,
        }
        self.load_note('fig 1 end')

    # -- figure 2 ------------------------------------------------------------
    def publish_backlog(self, n, topic='bench', chunk=100_000, keys=None):
        """n messages through outbox_publish, chunk a transaction; with keys,
        message g has key mod(g, keys) (so the keys interleave)."""
        done = 0
        key = "(mod(g, %d))::text" % keys if keys else 'NULL'
        while done < n:
            k = min(chunk, n - done)
            self.q("SELECT count(outbox_publish(%%s, %s, key => %s))"
                   " FROM generate_series(%d, %d) g"
                   % (payload_sql('g', 'mod(g, 100000)'), key, done + 1, done + k), (topic,))
            done += k

    def drain(self, n, label, topic='bench', per_message=1, keys=None, limit=None):
        """publish n messages with the relays paused, then time their delivery
        (per_message deliveries each: its topic's handlers); deliveries/s.
        With limit (seconds), a drain not done by then is cut there: the rate
        is what was delivered in that time, and self.drain_complete False."""
        self.drain_complete = True
        self.pause()
        self.q("DELETE FROM grelout.outbox WHERE topic = %s"
               " AND state IN ('pending', 'processing') AND available_at <= now()", (topic,))
        if per_message > 1:
            self.q("DELETE FROM grelout.fanout f WHERE NOT EXISTS"
                   " (SELECT FROM grelout.outbox o WHERE o.id = f.message_id)")
        self.publish_backlog(n, topic, keys=keys)
        n_msgs, n = n, n * per_message
        # both queue tables: the fan-out rows of the previous runs are gone
        self.q('VACUUM ANALYZE ' + self.queue_tables)
        self.q('CHECKPOINT')
        base, base_retried = self.relay_counts()
        ng0 = self.nginx_requests()
        cpu0, relay_pids = self.cpu_ticks()
        prof = os.environ.get('BENCH_PROFILE_DIR')
        if prof:
            with open(os.path.join(prof, 'drain'), 'w') as f:
                f.write('%s %s\n' % (label.replace(' ', '_'), ','.join(map(str, relay_pids))))
            time.sleep(1)
            if os.environ.get('BENCH_PGSS'):
                self.q('SELECT pg_stat_statements_reset()')
        self.q("ALTER SYSTEM SET grelout.relay = 'on'")
        t0 = time.time()
        self.q('SELECT pg_reload_conf()')
        last, last_t = base, t0
        while True:
            d = self.delivered()
            now = time.time()
            if d >= base + n:
                break
            if limit is not None and now - t0 > limit:
                self.drain_complete = False
                log('  %s: cut after %.0f s with %d of %d delivered'
                    % (label, limit, d - base, n))
                n = d - base
                break
            if d != last:
                last, last_t = d, now
            elif now - last_t > 60 and limit is None:
                raise Broken('%s: no delivery for 60 s, %d of %d delivered'
                             % (label, d - base, n))
            time.sleep(0.005)
        t1 = time.time()
        cpu1, _ = self.cpu_ticks()
        if prof:
            os.unlink(os.path.join(prof, 'drain'))
            if os.environ.get('BENCH_PGSS'):
                rows = self.q("SELECT calls, round(total_exec_time::numeric, 1), rows,"
                              " shared_blks_hit, shared_blks_dirtied, wal_records,"
                              " left(regexp_replace(query, '\\s+', ' ', 'g'), 160)"
                              " FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 25")
                with open(os.path.join(prof, label.replace(' ', '_') + '.pgss'), 'w') as f:
                    for r in rows:
                        f.write('\t'.join(map(str, r)) + '\n')
        hz = os.sysconf('SC_CLK_TCK')
        # each relay alive at the end, from the start or from when it came
        # (an elastic relay); one retired during the drain took its CPU time
        # with it, which is then missing (never negative, as a difference of
        # the totals was)
        relay_ticks = sum(t - cpu0['relay_each'].get(pid, 0)
                          for pid, t in cpu1['relay_each'].items())
        relay_us = relay_ticks * 1e6 / hz / max(n, 1)
        nginx_us = (cpu1['nginx'] - cpu0['nginx']) * 1e6 / hz / max(n, 1)
        self.res.setdefault('drain_cpu', []).append({'label': label, 'relay_us': relay_us,
                                               'nginx_us': nginx_us})
        left = self.q1("SELECT count(*) FROM grelout.outbox WHERE topic = %s"
                       " AND state IN ('pending', 'processing') AND available_at <= now()",
                       (topic,)) if self.drain_complete else 0
        failures = self.relay_counts()[1] - base_retried
        self.drain_failures = failures
        got = self.nginx_requests() - ng0
        if left != 0 or got < n:
            raise Broken('%s: %d rows left, nginx saw %d of %d' % (label, left, got, n))
        rate = n / (t1 - t0)
        if per_message > 1:
            log('  %-22s %7d msgs x %d = %7d deliveries in %6.2f s = %8.0f deliveries/s'
                ' (retries+dead %d), relay CPU %.1f us, nginx CPU %.1f us a delivery'
                % (label, n_msgs, per_message, n, t1 - t0, rate, failures, relay_us, nginx_us))
        else:
            log('  %-22s %7d msgs in %6.2f s = %8.0f msgs/s (retries+dead %d),'
                ' relay CPU %.1f us, nginx CPU %.1f us a delivery'
                % (label, n, t1 - t0, rate, failures, relay_us, nginx_us))
        return rate

    def wrk(self, conns, url=None, timeout=None):
        """wrk's requests/s with conns connections against url (figure 2's
        nginx location by default), a webhook-like POST each."""
        lua = os.path.join(self.work, 'post.lua')
        body = self.q1('SELECT %s::text' % payload_sql('12345678', '48213'))
        with open(lua, 'w') as f:
            f.write('-- a webhook-like POST for wrk\n'
                    'wrk.method = "POST"\n'
                    'wrk.body = %s\n'
                    'wrk.headers["Content-Type"] = "application/json"\n'
                    'wrk.headers["User-Agent"] = "grelout/1.1"\n'
                    'wrk.headers["webhook-id"] = "01890a5d-ac96-774b-bcce-b302099a8057"\n'
                    'wrk.headers["webhook-timestamp"] = "1700000000"\n'
                    'wrk.headers["grelout-topic"] = "bench"\n'
                    'wrk.headers["grelout-attempt"] = "1"\n' % json.dumps(body))
        threads = min(2, conns)
        r = subprocess.run(['wrk', '-t', str(threads), '-c', str(conns), '-d',
                            '%ds' % self.sz['wrk_seconds'], '-s', lua]
                           + (['--timeout', '%ds' % timeout] if timeout else [])
                           + [url or self.nginx_url + '/wrk'], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT)
        out = r.stdout.decode()
        m = re.search(r'Requests/sec:\s+([0-9.]+)', out)
        if r.returncode != 0 or not m:
            raise Broken('wrk failed:\n' + out)
        if 'Non-2xx' in out or 'Socket errors' in out:
            raise Broken('wrk saw errors:\n' + out)
        return float(m.group(1))

    def fig2_default(self):
        log('figure 2: delivery throughput, default settings, %d backlog' % self.sz['backlog'])
        self.load_note('fig 2 default start')
        rates = []
        for run in range(self.sz['runs']):
            rates.append(self.drain(self.sz['backlog'], 'default run %d' % (run + 1)))
            if run == 0:
                self.mem_sample('after first drain')
        # as many connections as the relay's default concurrency (issue 14)
        conns = int(self.q1('SHOW grelout.concurrency')) * int(self.q1('SHOW grelout.workers'))
        wrk = [self.wrk(conns) for _ in range(self.sz['runs'])]
        log('  wrk -c %d: %s req/s' % (conns, ', '.join('%.0f' % w for w in wrk)))
        self.res['figures']['2'] = {'default': rates, 'wrk_default': wrk,
                                    'default_conns': conns}
        self.load_note('fig 2 default end')

    def fig7(self):
        """fan-out: messages to 3 handlers, beside figure 2's single handler."""
        n = max(1, self.sz['backlog'] // 3)
        log('figure 7: fan-out, %d messages to 3 handlers (default settings)' % n)
        self.load_note('fig 7 start')
        rates = [self.drain(n, 'fan-out run %d' % (run + 1), topic='fan', per_message=3)
                 for run in range(self.sz['runs'])]
        self.res['figures']['7'] = {'messages': n, 'handlers': 3, 'rates': rates}
        self.load_note('fig 7 end')

    def fig2_tuned(self):
        log('figure 2: delivery throughput, tuned settings %s' % TUNED)
        self.load_note('fig 2 tuned start')
        rates = []
        for run in range(self.sz['runs']):
            rates.append(self.drain(self.sz['backlog'], 'tuned run %d' % (run + 1)))
        conns = int(TUNED['grelout.concurrency']) * int(TUNED['grelout.workers'])
        wrk = [self.wrk(conns) for _ in range(self.sz['runs'])]
        log('  wrk -c %d: %s req/s' % (conns, ', '.join('%.0f' % w for w in wrk)))
        self.res['figures']['2'].update(tuned=rates, wrk_tuned=wrk, tuned_conns=conns)
        self.load_note('fig 2 tuned end')

    def fig2_graphile(self):
        n = self.sz['graphile_backlog']
        log('figure 2: graphile-worker draining %d jobs (concurrency 50)' % n)
        self.load_note('fig 2 graphile start')
        self.pause()
        rates = []
        for run in range(self.sz['runs']):
            self.reset_tables()
            self.q("SELECT count(graphile_worker.add_job('post', %s::json))"
                   " FROM generate_series(1, %d) g"
                   % (payload_sql('g', 'mod(g, 100000)'), n))
            # fresh statistics, as grelout.outbox gets before its drains
            self.q('VACUUM ANALYZE graphile_worker._private_jobs')
            ng0 = self.nginx_requests()
            out = self.node(['drain', str(n)], capture=True)
            r = json.loads(out.strip().splitlines()[-1])
            got = self.nginx_requests() - ng0
            if got < n:
                raise Broken('graphile-worker: nginx saw %d of %d' % (got, n))
            rates.append(r['rate'])
            log('  graphile run %d %7d jobs in %6.2f s = %8.0f jobs/s'
                % (run + 1, n, r['seconds'], r['rate']))
        self.reset_tables()
        self.res['figures']['2'].update(graphile=rates, graphile_backlog=n)
        self.load_note('fig 2 graphile end')

    # -- figure 6 (samples taken along the way) --------------------------------
    def mem_sample(self, label):
        rows = self.relays()
        sample = {'label': label, 'delivered': {r[1]: r[4] for r in rows},
                  'rss': self.rss()}
        self.res.setdefault('mem', []).append(sample)
        total = sum(sample['delivered'].values())
        log('  memory %s: %d delivered, %s' % (
            label, total, ', '.join('pid %d VmRSS %d kB RssAnon %d kB' % (p, v['VmRSS'], v['RssAnon'])
                                    for p, v in sample['rss'].items())))
        return sample

    def fig6(self):
        """top the relays up to mem_second deliveries and sample again."""
        log('figure 6: memory after %d deliveries' % self.sz['mem_second'])
        self.load_note('fig 6 start')
        while True:
            done = self.delivered()
            if done >= self.sz['mem_second']:
                break
            self.drain(min(self.sz['mem_second'] - done, 4 * self.sz['backlog']),
                       'memory top-up')
        self.mem_sample('after %d' % self.sz['mem_second'])
        self.load_note('fig 6 end')

    # -- figure 5 ------------------------------------------------------------
    def fig5(self):
        rows = self.sz['scale_rows']
        log('figure 5: %d dead + %d delayed rows in the table' % (rows, rows))
        self.load_note('fig 5 start')
        self.pause()
        t = time.time()
        # direct inserts: the same rows outbox_publish, the routing of 1.1 (a
        # message is routed when a relay first sees it, delayed or not: here
        # to the one handler "bench", inline) and a dead-lettering make
        self.q("INSERT INTO grelout.outbox (id, topic, payload, attempts, available_at,"
               " state, last_error, dead_at, created_at, route, handler)"
               " SELECT gen_random_uuid(), 'bench', %s, 10, now() - interval '1 hour', 'dead',"
               " 'HTTP 500: internal error', now() - interval '1 hour', now() - interval '2 hours',"
               " 'single', 'bench'"
               " FROM generate_series(1, %d) g" % (payload_sql('g', 'mod(g, 100000)'), rows))
        self.q("INSERT INTO grelout.outbox (id, topic, payload, available_at, route, handler)"
               " SELECT gen_random_uuid(), 'bench', %s, now() + interval '1 day', 'single', 'bench'"
               " FROM generate_series(1, %d) g" % (payload_sql('g', 'mod(g, 100000)'), rows))
        self.q('VACUUM ANALYZE grelout.outbox')
        log('  filled in %.0f s' % (time.time() - t))
        rates = []
        for run in range(self.sz['runs']):
            rates.append(self.drain(self.sz['backlog'], 'with 2x%d rows run %d' % (rows, run + 1)))
        left = self.q("SELECT state, count(*) FROM grelout.outbox GROUP BY state ORDER BY 1")
        if dict(left) != {'dead': rows, 'pending': rows}:
            raise Broken('figure 5: the dead and delayed rows changed: %s' % (left,))
        self.pause()
        self.q('TRUNCATE grelout.outbox')
        self.q('VACUUM ANALYZE grelout.outbox')
        self.res['figures']['5'] = {'rates': rates, 'rows': rows}
        self.load_note('fig 5 end')

    # -- figure 8 ------------------------------------------------------------
    def start_receiver(self, name, hang=0.0):
        """bench.py receiver in a process of its own (with hang: figure 8's
        hanging endpoint); (process, port, log file)."""
        port_file = os.path.join(self.work, name + '.port')
        log_file = os.path.join(self.work, name + '.log')
        for f in (port_file, log_file):
            if os.path.exists(f):
                os.unlink(f)
        argv = [sys.executable, os.path.abspath(__file__), 'receiver', port_file, log_file]
        if hang:
            argv.append('%.3f' % hang)
        recv = self.spawn(argv)
        deadline = time.time() + 10
        while not os.path.exists(port_file) or not open(port_file).read().strip():
            if time.time() > deadline or recv.poll() is not None:
                raise Broken('receiver %s did not start' % name)
            time.sleep(0.05)
        return recv, int(open(port_file).read()), log_file

    def hang_requests(self):
        """requests the hanging endpoint has received so far."""
        with open(self.hang_log) as f:
            return sum(1 for _ in f)

    def noisy(self, name):
        """figure 8's hanging handler `name` (topic hang) with its backlog:
        created disabled, hang_backlog messages published and routed to it
        with the relays on (a disabled handler is sent nothing), the relays
        paused, then enabled: a routed backlog, all due, of a handler whose
        breaker is closed (a new name each time: no health kept)."""
        n = self.sz['hang_backlog']
        self.pause()
        self.q("INSERT INTO grelout.handlers (name, topic, url, enabled)"
               " VALUES (%s, 'hang', %s, false)", (name, self.hang_url))
        self.publish_backlog(n, 'hang')
        self.set_conf(grelout__relay='on')
        deadline = time.time() + 300
        while self.q1("SELECT count(*) FROM grelout.outbox WHERE topic = 'hang'"
                      " AND route = 'new'"):
            if time.time() > deadline:
                raise Broken('figure 8: the hanging backlog was not routed in 300 s')
            time.sleep(0.1)
        self.pause()
        self.q("UPDATE grelout.handlers SET enabled = true WHERE name = %s", (name,))
        self.q('VACUUM ANALYZE grelout.outbox')

    def noisy_state(self, name):
        """the hanging handler's grelout.handler_status (breaker, consecutive
        failures, in flight, pending, dead), or None without the view."""
        if not self.q1("SELECT to_regclass('grelout.handler_status') IS NOT NULL"):
            return None
        rows = self.q("SELECT breaker, consecutive_failures, in_flight, pending, dead"
                      " FROM grelout.handler_status WHERE handler = %s", (name,))
        return list(rows[0]) if rows else None

    def noisy_end(self, name):
        """pause (the hanging endpoint drops the requests it holds), then
        delete the hanging handler's messages and the handler."""
        self.pause()
        # the messages first: deleting the handler would unroute them
        self.q("DELETE FROM grelout.outbox WHERE topic = 'hang'")
        self.q("DELETE FROM grelout.handlers WHERE name = %s", (name,))

    def fig8(self):
        """noisy neighbour: the figure 2 drain, and the figure 4 latency, of
        a healthy handler alone, beside a handler whose endpoint hangs past
        grelout.request_timeout with a backlog of hang_backlog messages, and
        beside it with grelout.breaker_threshold = 0 (for information: fair
        slots without the breaker); each run measures every kind, in an
        order rotated run by run (default settings)."""
        n, hn = self.sz['backlog'], self.sz['hang_backlog']
        rate, seconds = self.sz['latency_rate'], self.sz['latency_seconds']
        timeout_ms = int(self.q1("SELECT setting FROM pg_settings"
                                 " WHERE name = 'grelout.request_timeout'"))
        conc = int(self.q1('SHOW grelout.concurrency'))
        has_breaker = bool(self.q1("SELECT count(*) FROM pg_settings"
                                   " WHERE name = 'grelout.breaker_threshold'"))
        kinds = ['alone', 'beside'] + (['breaker_off'] if has_breaker else [])
        # a healthy drain not done in this time is cut there (a starved one)
        limit = 120.0 if not self.quick else 30.0
        hang_s = timeout_ms / 1000.0 + 5.0
        log('figure 8: noisy neighbour, %d messages beside a hanging endpoint with %d'
            ' (request_timeout %d ms, it answers after %.0f s)' % (n, hn, timeout_ms, hang_s))
        self.load_note('fig 8 start')
        out = {'messages': n, 'hang_backlog': hn, 'timeout_ms': timeout_ms, 'hang_s': hang_s,
               'rate': rate, 'seconds': seconds, 'kinds': kinds, 'order': [],
               'has_breaker': has_breaker, 'limit': limit, 'concurrency': conc}
        for k in ('drain', 'complete', 'latency', 'hang_requests', 'hang_state'):
            out[k] = {kind: [] for kind in kinds}
        self.pause()
        self.q("DELETE FROM grelout.outbox WHERE topic = 'hang'")
        recv, port, self.hang_log = self.start_receiver('hang', hang_s)
        self.hang_url = 'http://127.0.0.1:%d/hang' % port
        self.on_pause = lambda: recv.send_signal(signal.SIGUSR1)
        try:
            # not counted: the cluster is warm as for the other figures
            self.drain(max(1, n // 5), 'noisy warm-up')
            for run in range(self.sz['runs']):
                order = kinds[run % len(kinds):] + kinds[:run % len(kinds)]
                out['order'].append(order)
                for kind in order:
                    if kind == 'breaker_off':
                        self.set_conf(grelout__breaker_threshold=0)
                    label = {'alone': 'healthy alone', 'beside': 'beside a hang',
                             'breaker_off': 'beside, breaker off'}[kind]
                    # the drain: both backlogs due from the same reload
                    name = 'hang-%d-%s-drain' % (run + 1, kind)
                    if kind != 'alone':
                        self.noisy(name)
                    h0 = self.hang_requests()
                    out['drain'][kind].append(self.drain(n, '%s run %d' % (label, run + 1),
                                                         limit=limit))
                    out['complete'][kind].append(self.drain_complete)
                    h1 = self.hang_requests()
                    state = None
                    if kind != 'alone':
                        state = self.noisy_state(name)
                        self.noisy_end(name)
                    # the latency: the hanging requests already hold the slots
                    # when the probes start
                    name = 'hang-%d-%s-latency' % (run + 1, kind)
                    if kind == 'alone':
                        # as noisy() does: not the dead index entries of the drain
                        self.q('VACUUM ANALYZE grelout.outbox')
                    else:
                        self.noisy(name)
                        self.set_conf(grelout__relay='on')
                        deadline = time.time() + 2.0
                        while time.time() < deadline and self.hang_requests() - h1 < min(hn, conc):
                            time.sleep(0.05)
                    h2 = self.hang_requests()
                    seen = {}
                    if kind != 'alone':
                        seen['at_end'] = lambda: seen.update(state=self.noisy_state(name),
                                                             h3=self.hang_requests())
                    r = self.latency_run('grelout', seconds, rate, allow_missing=True,
                                         at_end=seen.get('at_end'))
                    r['hang_before'] = h2 - h1
                    out['latency'][kind].append(r)
                    h3 = seen.get('h3', self.hang_requests())
                    lstate = seen.get('state')
                    if kind != 'alone':
                        self.noisy_end(name)
                    out['hang_requests'][kind].append([h1 - h0, h3 - h1])
                    out['hang_state'][kind].append([state, lstate])
                    if kind != 'alone':
                        log('  hanging endpoint: %d requests during the drain, %d during the'
                            ' latency run (%d before its probes); its health after: %s, %s'
                            % (h1 - h0, h3 - h1, h2 - h1, state, lstate))
                    if kind == 'breaker_off':
                        self.pause()
                        self.q('ALTER SYSTEM RESET grelout.breaker_threshold')
                        self.q('SELECT pg_reload_conf()')
        finally:
            self.on_pause = None
            if has_breaker:
                self.q('ALTER SYSTEM RESET grelout.breaker_threshold')
                self.q('SELECT pg_reload_conf()')
            self.stop_child(recv)
        self.pause()
        self.q("DELETE FROM grelout.outbox WHERE topic = 'hang'")
        self.q("DELETE FROM grelout.handlers WHERE topic = 'hang'")
        self.q('VACUUM ANALYZE grelout.outbox')
        self.res['figures']['8'] = out
        self.load_note('fig 8 end')

    # -- figure 9 ------------------------------------------------------------
    def fig9(self):
        """per-key ordering: the same keyed backlog (1,000 keys, interleaved)
        to an ordered handler and to an unordered one, default settings; then
        the latency of an ordered handler at the figure 4 rate."""
        n = self.sz['backlog']
        keys = 1000
        log('figure 9: per-key ordering, %d messages over %d keys (default settings)'
            % (n, keys))
        self.load_note('fig 9 start')
        out = {'messages': n, 'keys': keys, 'ordered': [], 'unordered': []}
        # the ordered handler exists only for its runs: a relay flushes the
        # commits of keyed claims while any handler is ordered
        for run in range(self.sz['runs']):
            for name in ('unordered', 'ordered'):
                self.q("INSERT INTO grelout.handlers (name, topic, url, ordered)"
                       " VALUES (%s, %s, %s, %s)",
                       (name, name, self.nginx_url + '/' + name, name == 'ordered'))
                out[name].append(self.drain(n, '%s run %d' % (name, run + 1),
                                            topic=name, keys=keys))
                self.pause()
                self.q("DELETE FROM grelout.handlers WHERE name = %s", (name,))
        rate = self.sz['latency_rate']
        self.pause()
        self.reset_tables()
        out['rate'] = rate
        out['latency'] = [self.latency_run('grelout', self.sz['latency_seconds'], rate,
                                           keys=keys)
                          for _ in range(self.sz['runs'])]
        self.reset_tables()
        self.res['figures']['9'] = out
        self.load_note('fig 9 end')

    # -- figure 4 ------------------------------------------------------------
    def latency_run(self, system, seconds, rate, keys=None, allow_missing=False, at_end=None):
        """commit-to-arrival latency of seconds x rate messages, one a
        transaction; with allow_missing, a message that never arrived counts
        as an infinite latency (and in r['missing']) instead of breaking;
        at_end is called once every message arrived (or the wait ended),
        before the relays are paused."""
        recv, port, log_file = self.start_receiver('recv.' + system)
        url = 'http://127.0.0.1:%d/latency' % port
        worker = None
        if system == 'grelout':
            self.q("INSERT INTO grelout.handlers (topic, url, ordered) VALUES ('latency', %s, %s)"
                   " ON CONFLICT (name) DO UPDATE SET url = excluded.url,"
                   " ordered = excluded.ordered", (url, keys is not None))
            self.set_conf(grelout__relay='on')
        else:
            self.pause()
            worker = self.spawn(['node', os.path.join(self.work, 'bench/graphile/worker.mjs'),
                                 'serve'], env=dict(self.node_env, TARGET_URL=url),
                                stdout=subprocess.PIPE)
            if worker.stdout.readline().decode().strip() != 'ready':
                raise Broken('graphile-worker serve did not start')
        time.sleep(0.5)
        conn = psycopg2.connect(host=self.work, port=self.a.pgport, dbname='bench',
                                user='postgres')
        cur = conn.cursor()
        sent = {}
        n = int(seconds * rate)
        t0 = time.time() + 0.1
        for i in range(n):
            wait = t0 + i / rate - time.time()
            if wait > 0:
                time.sleep(wait)
            payload = PAYLOAD_FMT.format(n=i, c=i % 1000)
            if system == 'grelout':
                cur.execute("SELECT outbox_publish('latency', %s::jsonb, key => %s)",
                            (payload, str(i % keys) if keys else None))
                mid = str(cur.fetchone()[0])
            else:
                mid = str(uuid.uuid4())
                body = json.loads(payload)
                body['id'] = mid
                cur.execute("SELECT graphile_worker.add_job('post', %s::json)",
                            (json.dumps(body),))
            conn.commit()
            sent[mid] = time.time()
        conn.close()
        # all arrivals, then stop
        deadline = time.time() + 30
        arrived = {}
        while time.time() < deadline:
            arrived = {}
            if os.path.exists(log_file):
                with open(log_file) as f:
                    for line in f:
                        parts = line.split()
                        if len(parts) == 2:
                            arrived.setdefault(parts[0], float(parts[1]))
            if all(k in arrived for k in sent):
                break
            time.sleep(0.2)
        if at_end is not None:
            at_end()
        if worker is not None:
            self.stop_child(worker)
        self.stop_child(recv)
        if system == 'grelout':
            self.pause()
            self.q("DELETE FROM grelout.handlers WHERE topic = 'latency'")
        missing = [k for k in sent if k not in arrived]
        if missing and not allow_missing:
            raise Broken('%s latency: %d of %d messages never arrived' % (system, len(missing), n))
        lat = sorted((arrived[k] - sent[k]) * 1000.0 if k in arrived else float('inf')
                     for k in sent)
        r = {'n': n, 'p50': percentile(lat, 50), 'p95': percentile(lat, 95),
             'p99': percentile(lat, 99), 'max': lat[-1], 'min': lat[0],
             'missing': len(missing)}
        log('  %-8s n=%d p50 %.2f ms p95 %.2f ms p99 %.2f ms max %.2f ms%s'
            % (system, n, r['p50'], r['p95'], r['p99'], r['max'],
               ', %d never arrived' % len(missing) if missing else ''))
        return r

    def fig4(self):
        rate = self.sz['latency_rate']
        log('figure 4: commit-to-arrival latency at %d msgs/s' % rate)
        self.load_note('fig 4 start')
        # no dead index entries left over from the drains before
        self.pause()
        self.reset_tables()
        out = {'rate': rate, 'grelout': [], 'graphile': []}
        for run in range(self.sz['runs']):
            for system in ('grelout', 'graphile'):
                out[system].append(self.latency_run(system, self.sz['latency_seconds'], rate))
        self.reset_tables()
        self.res['figures']['4'] = out
        self.load_note('fig 4 end')

    # -- figure 3 ------------------------------------------------------------
    def sustain(self, rate, seconds, label):
        """publish at rate msgs/s for seconds while the relays deliver."""
        per_tx = 10
        self.set_conf(grelout__relay='on')
        script = ("\\set n random(1, 10000000)\n"
                  "SELECT count(outbox_publish('bench', %s)) FROM generate_series(1, %d) g;\n"
                  % (payload_sql(':n * 10 + g', 'g'), per_tx))
        argv = self.pgbench(script, 'fig3', seconds, clients=4, rate=rate / per_tx)
        pub = subprocess.Popen(argv, env=self.env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)
        t0 = time.time()
        samples = []            # (seconds since start, backlog, delivered)
        while pub.poll() is None:
            time.sleep(0.5)
            samples.append((time.time() - t0,
                            self.q1("SELECT count(*) FROM grelout.outbox"
                                    " WHERE state IN ('pending', 'processing')"),
                            self.delivered()))
        out = pub.stdout.read().decode()
        if pub.returncode != 0 or len(samples) < 3:
            raise Broken('pgbench failed:\n' + out)
        _, ntx = self.parse_pgbench(out)
        published = ntx * per_tx
        pub_rate = published / seconds
        # delivery rate between the first and the last sample of the window
        (ta, _, da), (tb, _, db) = samples[0], samples[-1]
        delivered_rate = (db - da) / (tb - ta)
        end_backlog = samples[-1][1]
        second_half = [b for (t, b, _) in samples if t >= seconds / 2] or [end_backlog]
        limit = max(1000, rate * 1.0)
        grew = max(second_half) > limit
        short = pub_rate < 0.95 * rate
        bounded = not grew and not short
        why = '; '.join(w for w, c in (('backlog grew', grew),
                                       ('publishers reached %.0f%%' % (100.0 * pub_rate / rate),
                                        short)) if c)
        r = {'rate': rate, 'published_rate': pub_rate,
             'delivered_rate': delivered_rate,
             'max_backlog': max(b for _, b, _ in samples),
             'end_backlog': end_backlog, 'bounded': bounded, 'seconds': seconds,
             'why': why}
        log('  %-14s target %6d/s published %7.0f/s delivered %7.0f/s backlog max %6d end %6d %s'
            % (label, rate, pub_rate, r['delivered_rate'], r['max_backlog'], end_backlog,
               'bounded' if bounded else 'NOT bounded: ' + why))
        # let the rest drain before the next step (the harness's, not the figure's)
        deadline = time.time() + 120
        last, last_t = None, time.time()
        while True:
            left = self.q1("SELECT count(*) FROM grelout.outbox"
                           " WHERE state IN ('pending', 'processing')")
            if left == 0:
                break
            if left != last:
                last, last_t = left, time.time()
            elif time.time() - last_t > 60 or time.time() > deadline + 600:
                raise Broken('%s: backlog of %d stopped draining' % (label, left))
            time.sleep(0.2)
        self.q('VACUUM grelout.outbox')
        return r

    def fig3(self, ceiling):
        log('figure 3: sustained rate (ladder from the tuned drain rate %.0f/s)' % ceiling)
        self.load_note('fig 3 start')
        ladder = sorted({max(100, int(round(f * ceiling / 100.0)) * 100)
                         for f in self.sz['ladder']})
        probes = []
        best = None
        for rate in ladder:
            r = self.sustain(rate, self.sz['probe_seconds'], 'probe')
            probes.append(r)
            if not r['bounded']:
                break
            best = rate
        confirms = []
        chosen = None
        candidates = [x for x in ladder if best is not None and x <= best][::-1]
        # the best bounded probe, and if it fails its confirmation the next rate down
        for rate in candidates[:2]:
            runs = [self.sustain(rate, self.sz['confirm_seconds'], 'confirm')
                    for _ in range(self.sz['runs'])]
            confirms.append({'rate': rate, 'runs': runs})
            if sum(1 for r in runs if r['bounded']) * 2 > len(runs):
                chosen = rate
                break
        self.pause()
        self.res['figures']['3'] = {'probes': probes, 'confirms': confirms,
                                    'best': chosen, 'ladder': ladder}
        self.load_note('fig 3 end')

    # -- issue 14: figures 10, 11 and 12 ---------------------------------------
    def fig13(self):
        """the relay's HTTP engine alone (bench/http_engine.c over src/pure/http.c,
        no PostgreSQL) against the same nginx, with as many requests in
        flight as a relay has by default: what the HTTP side costs a
        delivery, and the most one relay could deliver were the database
        free; beside wrk with the same connections, run by run."""
        if not self.a.http_engine:
            log('figure 13: the HTTP engine alone: not measured (no driver)')
            self.res['figures']['13'] = {'missing': 'the driver did not build'}
            return
        conns = int(self.q1('SHOW grelout.concurrency'))
        n = self.sz['engine_requests']
        body = self.q1('SELECT %s::text' % payload_sql('12345678', '48213'))
        log('figure 13: the HTTP engine alone, %d requests, %d in flight' % (n, conns))
        out = {'requests': n, 'conns': conns, 'engine': [], 'cpu_us': [], 'wrk': [],
               'watch_changes': []}
        for run in range(self.sz['runs']):
            ng0 = self.nginx_requests()
            r = subprocess.run([self.a.http_engine, self.nginx_url + '/engine', str(n),
                                str(conns), body], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)
            text = r.stdout.decode()
            if r.returncode != 0:
                raise Broken('figure 13: the HTTP engine driver failed:\n' + text)
            got = json.loads(text)
            if self.nginx_requests() - ng0 < n:
                raise Broken('figure 13: nginx saw %d of %d requests'
                             % (self.nginx_requests() - ng0, n))
            out['engine'].append(got['requests'] / got['seconds'])
            out['cpu_us'].append(got['cpu_us'])
            out['watch_changes'].append(got['watch_changes'])
            out['wrk'].append(self.wrk(conns))
            log('  run %d: engine %.0f req/s, %.1f us CPU a request, %d epoll changes;'
                ' wrk -c %d %.0f req/s' % (run + 1, out['engine'][-1], got['cpu_us'],
                                            got['watch_changes'], conns, out['wrk'][-1]))
        self.res['figures']['13'] = out

    def fig10(self):
        """the figure 2 drain (default settings) of grelout 1.0 and of the
        current code, run by run in alternating order, on the same machine in
        the same run: 1.0 in its own cluster (OldCluster), same nginx."""
        n = self.sz['backlog']
        settings = dict(self.q("SELECT name, setting FROM pg_settings WHERE name IN"
                               " ('grelout.workers', 'grelout.concurrency',"
                               " 'grelout.batch_size')"))
        if self.a.old_missing or not self.a.old_pgport:
            reason = self.a.old_missing or 'no 1.0 cluster was given'
            log('figure 10: 1.0 beside the current code: not measured (%s)' % reason)
            self.res['figures']['10'] = {'missing': reason, 'settings': settings}
            return
        log('figure 10: grelout 1.0 beside the current code, %d backlog (default settings)' % n)
        self.load_note('fig 10 start')
        old = OldCluster(self.a)
        old.start()
        out = {'messages': n, 'v10': [], 'current': [], 'settings': settings,
               'v10_settings': dict(old.q("SELECT name, setting FROM pg_settings WHERE name IN"
                                          " ('grelout.workers', 'grelout.concurrency',"
                                          " 'grelout.batch_size')")),
               'v10_revision': self.a.old_revision, 'v10_version': old.version,
               'v10_library': old.library}
        log('  1.0 cluster: extension %s, relay library %s' % (old.version, old.library))
        try:
            # the current cluster is warm from the figures before: so is 1.0's
            # after a drain that is not counted (its relay, plans and buffers)
            self.pause()
            old.drain(max(1, n // 5), '1.0 warm-up')
            old.pause()
            for run in range(self.sz['runs']):
                order = ('v10', 'current') if run % 2 == 0 else ('current', 'v10')
                for who in order:
                    if who == 'v10':
                        self.pause()
                        out['v10'].append(old.drain(n, '1.0 run %d' % (run + 1)))
                        old.pause()
                    else:
                        out['current'].append(self.drain(n, 'current vs 1.0 run %d' % (run + 1)))
                        self.pause()
            cpu = lambda rows, pre: [c['relay_us'] for c in rows if c['label'].startswith(pre)]
            out['v10_relay_us'] = cpu(old.res.get('drain_cpu', []), '1.0 run')
            out['current_relay_us'] = cpu(self.res.get('drain_cpu', []), 'current vs 1.0')
        finally:
            old.stop()
        self.res['figures']['10'] = out
        self.load_note('fig 10 end')

    def fig11(self):
        """commit-to-arrival latency of probes at the figure 4 rate while
        publishers keep the total at a sustained loaded_rate msgs/s (default
        settings)."""
        rate, probe = self.sz['loaded_rate'], self.sz['latency_rate']
        log('figure 11: latency at %d msgs/s sustained (%d/s probes, default settings)'
            % (rate, probe))
        self.load_note('fig 11 start')
        self.pause()
        self.reset_tables()
        runs = [self.latency_loaded(rate, probe, self.sz['latency_seconds'])
                for _ in range(self.sz['runs'])]
        self.pause()
        self.reset_tables()
        self.res['figures']['11'] = {'rate': rate, 'probe_rate': probe, 'runs': runs}
        self.load_note('fig 11 end')

    def latency_loaded(self, rate, probe_rate, seconds):
        """one figure 11 run: pgbench -R publishes rate - probe_rate msgs/s
        (10 a transaction, to nginx) from warm-up to after the probes, while
        latency_run publishes and times the probes; a sampler records the
        backlog and the delivered counter every 0.5 s."""
        import threading
        per_tx, warm = 10, 2.0
        script = ("\\set n random(1, 10000000)\n"
                  "SELECT count(outbox_publish('bench', %s)) FROM generate_series(1, %d) g;\n"
                  % (payload_sql(':n * 10 + g', 'g'), per_tx))
        total = int(warm + seconds + 4)
        argv = self.pgbench(script, 'fig11', total, clients=4,
                            rate=(rate - probe_rate) / per_tx)
        self.set_conf(grelout__relay='on')
        samples, stop = [], threading.Event()

        def sampler():
            c = self.connect()
            with c.cursor() as cur:
                while not stop.is_set():
                    cur.execute("SELECT (SELECT count(*) FROM grelout.outbox"
                                " WHERE state IN ('pending', 'processing')),"
                                " (SELECT coalesce(sum(delivered), 0)::bigint"
                                " FROM grelout.relays)")
                    b, d = cur.fetchone()
                    samples.append((time.time(), b, d))
                    stop.wait(0.5)
            c.close()
        pub = subprocess.Popen(argv, env=self.env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)
        th = threading.Thread(target=sampler, daemon=True)
        th.start()
        try:
            time.sleep(warm)
            ta = time.time()
            r = self.latency_run('grelout', seconds, probe_rate)
            tb = time.time()
            text = pub.communicate()[0].decode()
        finally:
            stop.set()
            th.join()
            if pub.poll() is None:
                self.stop_child(pub)
        if pub.returncode != 0:
            raise Broken('figure 11: pgbench failed:\n' + text)
        _, ntx = self.parse_pgbench(text)
        # the probes' window, while the relays ran (latency_run pauses them at its end)
        window = [s for s in samples if ta <= s[0] <= tb - 1.0]
        if len(window) < 2:
            raise Broken('figure 11: too few samples in the window (%d)' % len(window))
        (t0, _, d0), (t1, _, d1) = window[0], window[-1]
        r.update(published_rate=ntx * per_tx / float(total) + probe_rate,
                 delivered_rate=(d1 - d0) / (t1 - t0),
                 max_backlog=max(b for _, b, _ in window))
        r['bounded'] = r['max_backlog'] <= max(1000, rate) and \
            r['delivered_rate'] >= 0.95 * min(rate, r['published_rate'])
        log('  loaded   published %.0f/s delivered %.0f/s in the window, max backlog %d'
            % (r['published_rate'], r['delivered_rate'], r['max_backlog']))
        # what the publishers added after the probes, delivered before the next step
        self.set_conf(grelout__relay='on')
        self.wait_empty('figure 11')
        self.q('VACUUM grelout.outbox')
        return r

    def wait_empty(self, label, stall=60):
        """wait until no message is pending or processing (relays on)."""
        last, last_t = None, time.time()
        while True:
            left = self.q1("SELECT count(*) FROM grelout.outbox"
                           " WHERE state IN ('pending', 'processing')"
                           " AND topic NOT LIKE 'idle.%%'")
            if left == 0:
                return
            if left != last:
                last, last_t = left, time.time()
            elif time.time() - last_t > stall:
                raise Broken('%s: backlog of %d stopped draining' % (label, left))
            time.sleep(0.2)

    def idle_backlog(self, topic, n):
        """n messages of topic published with the relays paused, then routed
        (relays on until none is left unrouted); the routes they got."""
        self.pause()
        self.publish_backlog(n, topic)
        self.set_conf(grelout__relay='on')
        deadline = time.time() + 300
        while self.q1("SELECT count(*) FROM grelout.outbox WHERE topic = %s"
                      " AND route = 'new'", (topic,)):
            if time.time() > deadline:
                raise Broken('figure 12: the %s backlog was not routed in 300 s' % topic)
            time.sleep(0.2)
        self.pause()
        routes = dict(self.q("SELECT route || ' ' || state, count(*) FROM grelout.outbox"
                             " WHERE topic = %s GROUP BY 1", (topic,)))
        log('  %d messages of %s: %s' % (n, topic, routes))
        return routes

    def fig12(self):
        """the figure 2 drain (default settings) with a backlog of idle_backlog
        messages of a topic no handler matches, and of a topic whose handler
        is disabled, against the same drain without them: each run drains all
        three, in an order rotated run by run, each backlog published and
        routed just before its drain and deleted after it."""
        n, idle = self.sz['backlog'], self.sz['idle_backlog']
        log('figure 12: drain of %d with %d messages of an idle topic' % (n, idle))
        self.load_note('fig 12 start')
        kinds = ['without', 'none', 'disabled']
        out = {'messages': n, 'idle': idle, 'order': []}
        out.update((k, []) for k in kinds)
        self.pause()
        self.q("DELETE FROM grelout.outbox WHERE topic LIKE 'idle.%%'")
        for run in range(self.sz['runs']):
            order = kinds[run % 3:] + kinds[:run % 3]
            out['order'].append(order)
            for kind in order:
                if kind == 'none':
                    out['none_routes'] = self.idle_backlog('idle.none', idle)
                elif kind == 'disabled':
                    self.q("INSERT INTO grelout.handlers (name, topic, url, enabled)"
                           " VALUES ('idle-off', 'idle.off', %s, false)",
                           (self.nginx_url + '/idle',))
                    out['disabled_routes'] = self.idle_backlog('idle.off', idle)
                label = {'without': 'no idle backlog', 'none': 'no-handler backlog',
                         'disabled': 'disabled backlog'}[kind]
                out[kind].append(self.drain(n, '%s run %d' % (label, run + 1)))
                if kind != 'without':
                    self.pause()
                    # the messages first: deleting the handler would unroute them
                    self.q("DELETE FROM grelout.outbox WHERE topic LIKE 'idle.%%'")
                    self.q("DELETE FROM grelout.handlers WHERE name = 'idle-off'")
        self.pause()
        self.q('VACUUM ANALYZE grelout.outbox, grelout.fanout')
        self.res['figures']['12'] = out
        self.load_note('fig 12 end')

    # -- issue 34: figure 14 ----------------------------------------------------
    AUTH_KINDS = ('hmac', 'v1a', 'mtls', 'oauth')

    def token_requests(self):
        """the requests nginx's /token location has answered (its own log)."""
        try:
            with open(os.path.join(os.path.dirname(self.a.tls_dir), 'token.log'), 'rb') as f:
                return sum(1 for _ in f)
        except FileNotFoundError:
            return 0

    def fig14(self):
        """endpoint authentication: the figure 2 drain (default settings) of
        auth_backlog messages over HTTPS (nginx, HTTP/2 by ALPN) to a handler
        signing with HMAC (whsec_, the baseline), one signing with ed25519
        (whsk_, v1a), one with a client certificate (mutual TLS) and one
        with OAuth2 client credentials (nginx's /token), the last two with
        an HMAC secret as the baseline has.  The server-wide grelout.ca_file
        trusts the run's test CA for all four.  Each run drains all four in
        an order rotated run by run, after an uncounted warm-up drain of
        each; each ratio is to the HMAC drain of the same run."""
        if not self.a.nginx_tls_port or not self.a.tls_dir:
            log('figure 14: endpoint authentication: not measured (no HTTPS nginx)')
            self.res['figures']['14'] = {'missing': 'bench/run started no HTTPS nginx'}
            return
        n = self.sz['auth_backlog']
        base = 'https://127.0.0.1:%d' % self.a.nginx_tls_port
        tls = lambda name: open(os.path.join(self.a.tls_dir, name)).read()
        log('figure 14: endpoint authentication over HTTPS, %d backlog (default settings)' % n)
        self.load_note('fig 14 start')
        self.pause()
        self.set_conf(grelout__ca_file=os.path.join(self.a.tls_dir, 'server-ca.crt'))
        hmac = lambda: 'whsec_' + base64.b64encode(os.urandom(32)).decode()
        oauth = json.dumps({'token_url': base + '/token', 'client_id': 'grelout-bench',
                            'client_secret': 'bench-client-secret', 'scope': 'webhooks'})
        cols = {
            'hmac': ({'secret': hmac()}),
            'v1a': ({'secret': self.q1('SELECT grelout.new_signing_key()')}),
            'mtls': ({'secret': hmac(), 'tls_client_cert': tls('client.crt'),
                      'tls_client_key': tls('client.key')}),
            'oauth': ({'secret': hmac(), 'oauth': oauth}),
        }
        kinds = list(self.AUTH_KINDS)
        for kind in kinds:
            c = dict(cols[kind], name='auth-' + kind, topic='auth.' + kind,
                     url='%s/%s' % (base, kind))
            self.q('DELETE FROM grelout.handlers WHERE name = %s', (c['name'],))
            self.q('INSERT INTO grelout.handlers (%s) VALUES (%s)'
                   % (', '.join(c), ', '.join(['%s'] * len(c))), list(c.values()))
        out = {'messages': n, 'order': [], 'url': base, 'protocol': None,
               'concurrency': int(self.q1('SHOW grelout.concurrency')), 'connections': {k: [] for k in kinds},
               'tokens': {k: [] for k in kinds}, 'relay_us': {k: [] for k in kinds},
               'failures': {k: [] for k in kinds}}
        out.update((k, []) for k in kinds)
        try:
            # the connections, TLS sessions and the token made once, as a
            # relay that has been delivering to these endpoints has them
            for kind in kinds:
                self.drain(max(1, n // 10), 'auth %s warm-up' % kind, topic='auth.' + kind)
            for run in range(self.sz['runs']):
                order = kinds[run % 4:] + kinds[:run % 4]
                out['order'].append(order)
                for kind in order:
                    label = 'auth %s run %d' % (kind, run + 1)
                    acc0, tok0 = self.nginx_status()[0], self.token_requests()
                    calls0 = self.status_calls
                    out[kind].append(self.drain(n, label, topic='auth.' + kind))
                    acc1, tok1 = self.nginx_status()[0], self.token_requests()
                    # less the status requests' own connections
                    acc1 -= self.status_calls - calls0
                    out['connections'][kind].append(acc1 - acc0)
                    out['tokens'][kind].append(tok1 - tok0)
                    out['failures'][kind].append(self.drain_failures)
                    out['relay_us'][kind].extend(c['relay_us'] for c in self.res['drain_cpu']
                                                 if c['label'] == label)
                    err = self.q("SELECT string_agg(DISTINCT last_error, '; ')"
                                 " FROM grelout.relays")[0][0]
                    log('  %s: %d connections accepted, %d token requests; relays\' last error: %s'
                        % (label, acc1 - acc0, tok1 - tok0, err))
                    if kind == 'hmac' and out['protocol'] is None:
                        out['protocol'] = self.https_protocol(base + '/hmac')
        finally:
            self.pause()
            self.q("DELETE FROM grelout.outbox WHERE topic LIKE 'auth.%%'")
            self.q("DELETE FROM grelout.handlers WHERE name LIKE 'auth-%%'")
            self.q('ALTER SYSTEM RESET grelout.ca_file')
            self.q('SELECT pg_reload_conf()')
        self.q('VACUUM ANALYZE grelout.outbox, grelout.fanout')
        self.res['figures']['14'] = out
        self.load_note('fig 14 end')

    # -- issue 33: figure 15 ----------------------------------------------------
    LOG_MODES = ('off', 'failed', 'all')

    def fig15(self):
        """the attempt log's cost: the figure 2 drain (default settings, nginx
        answering 204) of log_backlog messages with grelout.log_attempts =
        off, = failed (the default: a healthy endpoint's attempts are not
        logged) and = all (a grelout.attempts row a delivery, written by the
        settle).  Each of log_runs runs (at least 2) drains all three in an
        order rotated run by run; the log is emptied before each drain and
        its rows counted after."""
        n = self.sz['log_backlog']
        runs = max(2, self.sz['log_runs'])
        modes = list(self.LOG_MODES)
        log('figure 15: attempt log, drain of %d with log_attempts off, failed, all'
            ' (default settings, %d runs)' % (n, runs))
        self.load_note('fig 15 start')
        out = {'messages': n, 'order': [], 'logged': {m: [] for m in modes},
               'relay_us': {m: [] for m in modes}, 'failures': {m: [] for m in modes}}
        out.update((m, []) for m in modes)
        try:
            for run in range(runs):
                order = modes[run % 3:] + modes[:run % 3]
                out['order'].append(order)
                for mode in order:
                    label = 'log_attempts %s run %d' % (mode, run + 1)
                    self.pause()
                    self.set_conf(grelout__log_attempts=mode)
                    self.q('TRUNCATE grelout.attempts')
                    out[mode].append(self.drain(n, label))
                    out['logged'][mode].append(self.q1('SELECT count(*) FROM grelout.attempts'))
                    out['failures'][mode].append(self.drain_failures)
                    out['relay_us'][mode].extend(c['relay_us'] for c in self.res['drain_cpu']
                                                 if c['label'] == label)
                    log('  %s: %d attempts logged' % (label, out['logged'][mode][-1]))
        finally:
            self.pause()
            self.q('ALTER SYSTEM RESET grelout.log_attempts')
            self.q('SELECT pg_reload_conf()')
            self.q('TRUNCATE grelout.attempts')
        self.q('VACUUM ANALYZE grelout.outbox, grelout.fanout, grelout.attempts')
        self.res['figures']['15'] = out
        self.load_note('fig 15 end')

    def https_protocol(self, url):
        """the HTTP version nginx's HTTPS server speaks to libcurl (curl's
        command line, same CA): what the relay's engine gets by ALPN."""
        r = subprocess.run(['curl', '-s', '-o', '/dev/null', '-w', '%{http_version}',
                            '--cacert', os.path.join(self.a.tls_dir, 'server-ca.crt'),
                            '-X', 'POST', '-H', 'webhook-signature: v1,x', url],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        v = r.stdout.decode().strip()
        return ('HTTP/' + v) if r.returncode == 0 and v else 'unknown'

    # -- issue 32: figures 16 to 19 ----------------------------------------------
    def put_handler(self, name, topic, url):
        """a handler of its own for a figure (replacing one of that name)."""
        self.q('DELETE FROM grelout.handlers WHERE name = %s', (name,))
        self.q('INSERT INTO grelout.handlers (name, topic, url) VALUES (%s, %s, %s)',
               (name, topic, url))

    def fig16(self):
        """far: the drain of far_backlog messages (default settings) to
        nginx's /far, which reads each POST's body and answers 204 100 ms
        later, beside wrk with far_conns connections against the same
        location, and graphile-worker at its defaults (concurrency 1) with
        far_graphile jobs; then the same drain over HTTPS (HTTP/2 as libcurl
        and nginx agree by ALPN), set beside the same ceiling: wrk speaks
        HTTP/1.1 only, and over TLS it cannot hold 2,000 connections here
        (0 requests done in 4 s; 3,300 requests/s with 500), so that it
        would measure itself, not the endpoint.  pg_net is not measured:
        Debian does not package it."""
        n, conns = self.sz['far_backlog'], self.sz['far_conns']
        # wrk needs a file a connection (main raised the soft limit to the hard)
        files = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if files != resource.RLIM_INFINITY and files < conns + 64:
            conns = files - 64
            self.res['notes'].append('figure 16: wrk had %d connections, not %d: the open-file '
                                     'limit is %d' % (conns, self.sz['far_conns'], files))
        log('figure 16: an endpoint 100 ms away, %d backlog (default settings)' % n)
        self.load_note('fig 16 start')
        self.pause()
        out = {'messages': n, 'conns': conns, 'http': [], 'wrk': [], 'failures': [],
               'https': [], 'failures_https': [], 'protocol': None,
               'graphile': [], 'graphile_jobs': self.sz['far_graphile'],
               'concurrency': self.q1('SHOW grelout.concurrency'),
               'pg_net': 'not measured: pg_net is not in Debian\'s packages'}
        self.put_handler('far', 'far', self.nginx_url + '/far')
        base = None
        if self.a.nginx_tls_port and self.a.tls_dir:
            base = 'https://127.0.0.1:%d' % self.a.nginx_tls_port
            self.set_conf(grelout__ca_file=os.path.join(self.a.tls_dir, 'server-ca.crt'))
            self.put_handler('far-https', 'far.https', base + '/far')
        try:
            for run in range(self.sz['runs']):
                out['http'].append(self.drain(n, 'far run %d' % (run + 1), topic='far'))
                out['failures'].append(self.drain_failures)
                out['wrk'].append(self.wrk(conns, self.nginx_url + '/far', timeout=10))
                log('  wrk -c %d /far: %.0f req/s' % (conns, out['wrk'][-1]))
                if base is None:
                    continue
                out['https'].append(self.drain(n, 'far https run %d' % (run + 1),
                                               topic='far.https'))
                out['failures_https'].append(self.drain_failures)
                if out['protocol'] is None:
                    out['protocol'] = self.https_protocol(base + '/far')
        finally:
            self.pause()
            self.q("DELETE FROM grelout.outbox WHERE topic IN ('far', 'far.https')")
            self.q("DELETE FROM grelout.handlers WHERE name IN ('far', 'far-https')")
            if base is not None:
                self.q('ALTER SYSTEM RESET grelout.ca_file')
                self.q('SELECT pg_reload_conf()')
        g = self.sz['far_graphile']
        env = dict(self.node_env, TARGET_URL=self.nginx_url + '/far', CONCURRENCY='1')
        for run in range(self.sz['runs']):
            self.reset_tables()
            self.q("SELECT count(graphile_worker.add_job('post', %s::json))"
                   " FROM generate_series(1, %d) g"
                   % (payload_sql('g', 'mod(g, 100000)'), g))
            ng0 = self.nginx_requests()
            r = json.loads(self.node(['drain', str(g)], capture=True,
                                     env=env).strip().splitlines()[-1])
            if self.nginx_requests() - ng0 < g:
                raise Broken('graphile-worker far: nginx saw fewer than %d requests' % g)
            out['graphile'].append(r['rate'])
            log('  graphile far run %d %5d jobs in %6.2f s = %8.1f jobs/s (concurrency 1)'
                % (run + 1, g, r['seconds'], r['rate']))
        self.reset_tables()
        self.res['figures']['16'] = out
        self.load_note('fig 16 end')

    def fig17(self):
        """knee: the drain of knee_backlog messages (default settings) to
        nginx's /knee, which answers at most 300 requests a second and
        delays the rest in its queue (limit_req, no refusals), so that the
        latency of an answer grows with the requests in flight; the
        failures (timeouts among them) counted."""
        n = self.sz['knee_backlog']
        log('figure 17: an endpoint that serves 300 requests/s and queues the rest, %d backlog'
            % n)
        self.load_note('fig 17 start')
        self.pause()
        self.put_handler('knee', 'knee', self.nginx_url + '/knee')
        out = {'messages': n, 'limit': 300, 'rates': [], 'failures': [], 'errors': []}
        try:
            for run in range(self.sz['runs']):
                out['rates'].append(self.drain(n, 'knee run %d' % (run + 1), topic='knee'))
                out['failures'].append(self.drain_failures)
                out['errors'].append(self.q1("SELECT last_error FROM grelout.handler_status"
                                             " WHERE handler = 'knee'"))
        finally:
            self.pause()
            self.q("DELETE FROM grelout.outbox WHERE topic = 'knee'")
            self.q("DELETE FROM grelout.handlers WHERE name = 'knee'")
        self.res['figures']['17'] = out
        self.load_note('fig 17 end')

    def relays_down_to(self, n, timeout=60):
        """wait until at most n relays run (extra ones retire when idle);
        past timeout, end the newest extra ones (idle: nothing is lost)."""
        count = lambda: self.q1("SELECT count(*) FROM pg_stat_activity"
                                " WHERE backend_type = 'grelout relay'")
        deadline = time.time() + timeout
        while count() > n and time.time() < deadline:
            time.sleep(0.5)
        if count() > n:
            self.q("SELECT pg_terminate_backend(pid) FROM (SELECT pid FROM pg_stat_activity"
                   " WHERE backend_type = 'grelout relay' ORDER BY backend_start"
                   " OFFSET %s) extra", (n,))
            deadline = time.time() + 30
            while count() > n and time.time() < deadline:
                time.sleep(0.2)

    def fig18(self):
        """near: the figure 2 drain (near_backlog, instant nginx) at default
        settings, against the same with grelout.max_workers = 1 (one relay
        however long the backlog), interleaved run by run."""
        n = self.sz['near_backlog']
        log('figure 18: default drain against one relay, %d backlog' % n)
        if not self.q1("SELECT count(*) FROM pg_settings WHERE name = 'grelout.max_workers'"):
            self.res['figures']['18'] = {'missing': 'this grelout has no grelout.max_workers'}
            log('  not measured: no grelout.max_workers')
            return
        self.load_note('fig 18 start')
        out = {'messages': n, 'default': [], 'one': [], 'relays': [],
               'max_workers': self.q1('SHOW grelout.max_workers'),
               'relay_us_default': [], 'relay_us_one': []}
        cpu = lambda label: [c['relay_us'] for c in self.res['drain_cpu'] if c['label'] == label]
        try:
            for run in range(self.sz['runs']):
                self.pause()
                self.set_conf(grelout__max_workers=1)
                self.relays_down_to(self.workers)
                label = 'near one relay run %d' % (run + 1)
                out['one'].append(self.drain(n, label))
                out['relay_us_one'].extend(cpu(label))
                self.pause()
                self.q('ALTER SYSTEM RESET grelout.max_workers')
                self.q('SELECT pg_reload_conf()')
                label = 'near default run %d' % (run + 1)
                out['default'].append(self.drain(n, label))
                out['relay_us_default'].extend(cpu(label))
                out['relays'].append(self.q1("SELECT count(*) FROM pg_stat_activity"
                                             " WHERE backend_type = 'grelout relay'"))
                log('  %d relays after the default drain' % out['relays'][-1])
        finally:
            self.pause()
            self.q('ALTER SYSTEM RESET grelout.max_workers')
            self.q('SELECT pg_reload_conf()')
        self.res['figures']['18'] = out
        self.load_note('fig 18 end')

    def fig19(self):
        """figure 4's commit-to-arrival latency, at latency_low_rate."""
        rate = self.sz['latency_low_rate']
        log('figure 19: commit-to-arrival latency at %d msgs/s' % rate)
        self.load_note('fig 19 start')
        self.pause()
        self.reset_tables()
        out = {'rate': rate, 'grelout': [self.latency_run('grelout', self.sz['latency_seconds'],
                                                          rate)
                                         for _ in range(self.sz['runs'])]}
        self.reset_tables()
        self.res['figures']['19'] = out
        self.load_note('fig 19 end')

    # -- machine -------------------------------------------------------------
    def machine(self):
        def sh(cmd):
            try:
                return subprocess.run(cmd, shell=True, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT).stdout.decode().strip()
            except OSError:
                return '?'
        model = sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2").strip()
        mem = sh("awk '/MemTotal/ {printf \"%.1f GiB\", $2/1048576}' /proc/meminfo")
        lock = json.load(open(os.path.join(self.work, 'bench/graphile/package-lock.json')))
        gw = lock['packages'].get('node_modules/graphile-worker', {}).get('version', '?')
        return {
            'cpu': model, 'cores': sh('nproc'), 'memory': mem,
            'kernel': sh('uname -sr'), 'os': 'Debian ' + sh('cat /etc/debian_version'),
            'postgres': self.q1('SELECT version()'),
            'pg_major': self.pg_major(),
            'built_in': self.a.built_in or '?',
            'relay_curl': self.a.relay_curl or '?',
            'curl': sh('curl --version | head -1'),
            'nginx': sh('/usr/sbin/nginx -v 2>&1'),
            'wrk': sh('wrk --version 2>&1 | head -1').split(' Copyright')[0],
            'node': sh('node --version'), 'graphile': gw,
            'revision': self.a.revision,
            'settings': dict(self.q("SELECT name, current_setting(name)"
                                    " FROM pg_settings WHERE name IN ('fsync',"
                                    " 'synchronous_commit', 'shared_buffers', 'max_wal_size',"
                                    " 'checkpoint_timeout', 'wal_sync_method', 'full_page_writes')"
                                    " ORDER BY name")),
        }

    def pg_major(self):
        """the server's major version; it must be the one bench/run set up."""
        major = int(self.q1("SELECT current_setting('server_version_num')::int / 10000"))
        if self.a.pg_major and major != self.a.pg_major:
            raise Broken('bench/run started PostgreSQL %d, the server says %d'
                         % (self.a.pg_major, major))
        return major

    # -- the whole run ---------------------------------------------------------
    def run(self):
        only = set(filter(None, os.environ.get('BENCH_ONLY', '').split(',')))
        want = lambda f: not only or f in only
        self.setup()
        self.res['machine'] = self.machine()
        self.load_note('start')
        self.mem_sample('at start')
        if want('1'):
            self.fig1()
        if want('2') or want('6') or want('3'):
            self.fig2_default()
        if want('7'):
            if '2' not in self.res['figures']:
                self.fig2_default()
            self.fig7()
        if want('8'):
            self.fig8()
        if want('10'):
            self.fig10()
        if want('12'):
            self.fig12()
        if want('13'):
            self.fig13()
        if want('14'):
            self.fig14()
        if want('16'):
            self.fig16()
        if want('17'):
            self.fig17()
        if want('18'):
            self.fig18()
        if want('15'):
            self.fig15()
        if want('9'):
            self.fig9()
        if want('4'):
            self.fig4()
        if want('19'):
            self.fig19()
        if want('11'):
            self.fig11()
        if want('5'):
            self.fig5()
        if want('6'):
            self.fig6()
        if want('2') or want('3'):
            self.pause()
            for k, v in TUNED.items():
                self.q('ALTER SYSTEM SET %s = %%s' % k, (v,))
            self.workers = int(TUNED['grelout.workers'])
            self.restart_pg()
            self.wait_relays(self.workers)
            self.fig2_tuned()
        if want('2'):
            self.fig2_graphile()
        # last: the longest, up to two confirmations of 3 x 60 s
        if want('3'):
            self.fig3(statistics.median(self.res['figures']['2']['tuned']))
        self.load_note('end')
        self.res['elapsed'] = self.elapsed()
        with open(os.path.join(self.work, 'results.json'), 'w') as f:
            json.dump(self.res, f, indent=1, default=str)
        with open(os.path.join(self.work, 'results.md'), 'w') as f:
            f.write(render(self.res, self.sz, self.quick))
        log('done in %.0f s' % self.res['elapsed'])


class OldCluster(Bench):
    """Figure 10's grelout 1.0: a cluster of the copy of this PostgreSQL in
    which bench/run installed 1.0 (built from its commit), with the same
    settings and the same nginx.  Bench's drain runs against it as it does
    against the current code; its schema has no grelout.fanout."""

    def __init__(self, args):
        a = argparse.Namespace(**vars(args))
        a.pgbin, a.pgdata, a.pgport = args.old_pgbin, args.old_pgdata, args.old_pgport
        super().__init__(a)
        self.queue_tables = 'grelout.outbox'
        self.version = self.library = None

    def start(self):
        """start the cluster, create the extension and the figure 2 handler,
        wait for its relay; note which library the relay runs."""
        subprocess.run([os.path.join(self.a.pgbin, 'pg_ctl'), '-D', self.a.pgdata, '-w',
                        '-t', '60', 'start', '-l',
                        os.path.join(os.path.dirname(self.a.pgdata), 'postgres.log')],
                       check=True, stdout=subprocess.DEVNULL, env=self.env)
        c = psycopg2.connect(host=self.work, port=self.a.pgport, dbname='postgres',
                             user='postgres')
        c.autocommit = True
        with c.cursor() as cur:
            cur.execute("SELECT count(*) FROM pg_database WHERE datname = 'bench'")
            if cur.fetchone()[0] == 0:
                cur.execute('CREATE DATABASE bench')
        c.close()
        self.q('CREATE EXTENSION IF NOT EXISTS grelout')
        self.version = self.q1("SELECT extversion FROM pg_extension WHERE extname = 'grelout'")
        if self.version != '1.0':
            raise Broken('figure 10: the 1.0 cluster has grelout %s' % self.version)
        if not self.q1("SELECT count(*) FROM grelout.handlers WHERE topic = 'bench'"):
            self.q("INSERT INTO grelout.handlers (topic, url) VALUES ('bench', %s)",
                   (self.nginx_url + '/hook',))
        self.wait_relays(1, timeout=90)
        pid = self.relays()[0][1]
        with open('/proc/%d/maps' % pid) as f:
            libs = {line.split()[-1] for line in f if line.rstrip().endswith('/grelout.so')}
        if len(libs) != 1 or not next(iter(libs)).startswith(self.work + '/'):
            raise Broken('figure 10: the 1.0 relay runs %s' % (libs,))
        self.library = next(iter(libs))

    def stop(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        subprocess.run([os.path.join(self.a.pgbin, 'pg_ctl'), '-D', self.a.pgdata, '-m',
                        'fast', '-w', '-t', '60', 'stop'], check=False,
                       stdout=subprocess.DEVNULL, env=self.env)


# ---------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------
def fmt(v, unit='', digits=0):
    return ('%.*f' % (digits, v)) + unit


def row3(name, values, digits=0, unit=''):
    m, lo, hi = stats(values)
    return '| %s | %s | %s | %s |' % (name, fmt(m, unit, digits), fmt(lo, unit, digits),
                                      fmt(hi, unit, digits))


# The 1.1 figures' in-run ratios: each one's line in the report, as its
# section prints it (%.2f: the ratio) and previous_ratios reads it back.
CAPTURED_ROW = 'grelout, captured INSERT'     # figure 1's row of its ratios (row3)
RATIO_LINES = (
    ('captured INSERT', '| ' + CAPTURED_ROW + ' | %.2f |'),
    ('fan-out', 'Ratio (fan-out / single handler): **%.2f**'),
    ('noisy neighbour', 'Drain ratio (beside the hanging endpoint / alone), '
                        'median of the runs\' ratios: **%.2f**.'),
    ('ordered', 'Ratio (ordered / unordered): **%.2f**'),
)


def ratio_line(label, value):
    """the report's line of a 1.1 figure's ratio (RATIO_LINES)."""
    return dict(RATIO_LINES)[label] % value


def report_pg_major(text):
    """the PostgreSQL major version a report's figures were measured on: its
    "Measured on" line, or (a report made before bench/run --pg) the server
    of its Machine table; None when it says neither."""
    m = re.search(r'^\*\*Measured on PostgreSQL ([0-9]+)\*\*', text, re.M)
    if not m:
        m = re.search(r'^\| PostgreSQL \| PostgreSQL ([0-9]+)', text, re.M)
    return int(m.group(1)) if m else None


def previous_ratios(path, pg_major=None):
    """the 1.1 figures' ratios in the report this run replaces (a dict by
    label, with 'revision' and 'pg_major'), or None when there is none to
    read, or it was measured on another PostgreSQL than pg_major (given)."""
    if not path or not os.path.exists(path):
        return None
    with open(path) as f:
        text = f.read()
    if 'Quick smoke run' in text:
        return None
    major = report_pg_major(text)
    if pg_major is not None and major != pg_major:
        return None
    prev = {'pg_major': major}
    m = re.search(r'^\| grelout measured \| ([^|]+) \|', text, re.M)
    prev['revision'] = m.group(1).strip() if m else 'unknown'
    for label, line in RATIO_LINES:
        pattern = re.escape(line).replace(re.escape('%.2f'), '([0-9]+[.][0-9]+)')
        m = re.search(pattern, text)
        if m:
            prev[label] = float(m.group(1))
    return prev


# The headline figures a report carries in its figures block, for setting
# one version's run beside another's: (key, label, unit).  Lower is better
# for the latencies; "within 10%" is the same either way.
HEADLINES = (
    ('publish_tps', '1. INSERT + `outbox_publish`, TPS', ''),
    ('publish_plain_tps', '1. INSERT + plain INSERT, TPS', ''),
    ('publish_ratio', '1. grelout / plain INSERT', 'x'),
    ('drain_default', '2. drain, default settings, msgs/s', ''),
    ('drain_tuned', '2. drain, tuned settings, msgs/s', ''),
    ('drain_graphile', '2. graphile-worker drain, msgs/s', ''),
    ('wrk_default', '2. wrk ceiling (no PostgreSQL), req/s', ''),
    ('sustained', '3. highest sustained rate, msgs/s', ''),
    ('latency_p50', '4. latency p50, ms', 'ms'),
    ('latency_p99', '4. latency p99, ms', 'ms'),
    ('scale_drain', '5. drain beside dead and delayed rows, msgs/s', ''),
    ('fanout', '7. fan-out, deliveries/s', ''),
    ('ordered', '9. ordered drain, deliveries/s', ''),
    ('unordered', '9. unordered drain, deliveries/s', ''),
)
FIGURES_TAG = '<!-- grelout-bench-figures '


def headline_figures(res):
    """this run's headline figures (medians), by HEADLINES key; a figure not
    measured is absent."""
    f = res['figures']
    med = lambda v: stats(v)[0]
    got = {}
    if '1' in f:
        got['publish_tps'] = med(f['1']['tps']['grelout'])
        got['publish_plain_tps'] = med(f['1']['tps']['plain'])
        got['publish_ratio'] = med(f['1']['ratio_grelout'])
    if '2' in f:
        x = f['2']
        got['drain_default'] = med(x['default'])
        got['wrk_default'] = med(x['wrk_default'])
        if 'tuned' in x:
            got['drain_tuned'] = med(x['tuned'])
        if 'graphile' in x:
            got['drain_graphile'] = med(x['graphile'])
    if '3' in f and f['3'].get('best'):
        got['sustained'] = f['3']['best']
    if '4' in f:
        got['latency_p50'] = med([r['p50'] for r in f['4']['grelout']])
        got['latency_p99'] = med([r['p99'] for r in f['4']['grelout']])
    if '5' in f:
        got['scale_drain'] = med(f['5']['rates'])
    if '7' in f:
        got['fanout'] = med(f['7']['rates'])
    if '9' in f:
        got['ordered'] = med(f['9']['ordered'])
        got['unordered'] = med(f['9']['unordered'])
    return got


def figures_block(res, quick):
    """the report's last line: its version and headline figures as JSON in
    an HTML comment (invisible in the rendered report), which another
    version's run reads back (report_figures)."""
    m = res['machine']
    data = {'pg_major': m['pg_major'], 'postgres': m['postgres'], 'quick': bool(quick),
            'revision': m['revision'],
            'load': [(step, v) for step, v in res['load'] if step in ('start', 'end')],
            'figures': {k: round(v, 3) for k, v in headline_figures(res).items()}}
    return FIGURES_TAG + json.dumps(data, sort_keys=True) + ' -->'


def report_figures(path):
    """a report's figures block (a dict), or None when there is no report or
    it carries none (made before bench/run --pg)."""
    if not path or not os.path.exists(path):
        return None
    with open(path) as f:
        for line in f:
            if line.startswith(FIGURES_TAG):
                try:
                    return json.loads(line[len(FIGURES_TAG):].rsplit('-->', 1)[0])
                except ValueError:
                    return None
    return None


def render_versions(res, quick):
    """the section that sets this run's headline figures beside another
    version's report (15's), figure by figure, with their ratio and whether
    it is within 10% (said, never judged: the load of both runs is beside);
    [] when there is no such report to compare with."""
    base, name = res.get('baseline'), res.get('baseline_name') or 'the baseline report'
    m = res['machine']
    if res.get('baseline_name') is None:
        return []
    L = ['## PostgreSQL %d beside PostgreSQL %s\n'
         % (m['pg_major'], base['pg_major'] if base else '15')]
    if base is None:
        L.append('`%s` is missing or carries no figures block (a report made before '
                 '`bench/run --pg`): not compared. Run `make bench` (15) and then this '
                 'version again.\n' % name)
        return L
    if bool(base.get('quick')) != bool(quick):
        L.append('`%s` is a %s run and this one a %s run: not compared.\n'
                 % (name, 'quick' if base.get('quick') else 'full', 'quick' if quick else 'full'))
        return L
    now = headline_figures(res)
    L.append('Each figure\'s median against `%s` (PostgreSQL %s, `%s`, grelout %s), '
             'same peers and settings. "within 10%%" says whether the ratio lies in '
             '0.90 - 1.10; it is reported, never a failure; a figure outside it is for the '
             'notes (bench/README.md, "Versions").%s\n'
             % (name, base['pg_major'], base.get('postgres', '?').split(' on ')[0],
                base.get('revision', '?'),
                ' Quick runs: tiny sizes, one run each; their ratios are noise.' if quick else ''))
    L.append('| figure | PostgreSQL %s | PostgreSQL %d | %d / %s | within 10%% |'
             % (base['pg_major'], m['pg_major'], m['pg_major'], base['pg_major']))
    L.append('| --- | --- | --- | --- | --- |')
    outside = []
    for key, label, unit in HEADLINES:
        b, n = base['figures'].get(key), now.get(key)
        if b is None or n is None or not b:
            continue
        r = round(n / b, 2)      # judged as printed
        digits = 2 if unit in ('x', 'ms') else 0
        within = 0.9 <= r <= 1.1
        if not within:
            outside.append(label)
        L.append('| %s | %.*f | %.*f | %.2f | %s |'
                 % (label, digits, b, digits, n, r, 'yes' if within else 'no'))
    L.append('')
    la = lambda load: ', '.join('%s %s' % (step, v.split()[0]) for step, v in load
                                if step in ('start', 'end')) or '-'
    L.append('1-minute load average, PostgreSQL %s run: %s; this run: %s.\n'
             % (base['pg_major'], la(base.get('load', [])), la(res['load'])))
    if outside:
        L.append('Outside 10%%: %s.\n' % '; '.join(outside))
    return L


def ratios_11(res):
    """this run's 1.1 figures' ratios, computed as their sections print them
    (a dict by label; a figure not measured is absent)."""
    f = res['figures']
    got = {}
    if '1' in f and 'ratio_capture' in f['1']:
        got['captured INSERT'] = stats(f['1']['ratio_capture'])[0]
    if '7' in f and '2' in f:
        got['fan-out'] = stats(f['7']['rates'])[0] / stats(f['2']['default'])[0]
    if '8' in f and 'beside' in f['8']['drain']:
        x = f['8']['drain']
        got['noisy neighbour'] = statistics.median(p / q for p, q in zip(x['beside'], x['alone']))
    if '9' in f:
        got['ordered'] = stats(f['9']['ordered'])[0] / stats(f['9']['unordered'])[0]
    return got


def regression_11(res, quick):
    """the "none regresses" cell of the 1.1 figures: what moved against the
    report this run replaces (ratios rounded as printed; a fall of more than
    10% is a regression), and whether none did (None: nothing to compare)."""
    prev = res.get('previous')
    now = {k: round(v, 2) for k, v in ratios_11(res).items()}
    if quick:
        return 'not compared (quick run)', None
    if not prev:
        return 'no previous report to compare with', None
    moves, fell, compared = [], [], 0
    for label, _ in RATIO_LINES:
        if label in now and label in prev:
            compared += 1
            moves.append('%s %.2f -> %.2f' % (label, prev[label], now[label]))
            if now[label] < 0.9 * prev[label]:
                fell.append(label)
    if compared == 0:
        return 'nothing in common with the previous report (%s)' % prev['revision'], None
    text = 'against the previous report (%s): %s' % (prev['revision'], ', '.join(moves))
    if fell:
        text += '; fell by more than 10%%: %s' % ', '.join(fell)
    return text, not fell


def render_issue14(res, sz, quick=False):
    """the sections of figures 10 to 13 and the issue 14 targets table,
    as two lists of markdown lines."""
    f = res['figures']
    L, T = [], []
    med = lambda v: stats(v)[0]
    # the median of run-by-run ratios (each run drains both sides back to back)
    paired = lambda a, b: statistics.median(p / q for p, q in zip(a, b))
    if '10' in f:
        x = f['10']
        L.append('## 10. grelout 1.0 beside the current code\n')
        if 'missing' in x:
            L.append('Not measured (%s).\n' % x['missing'])
        else:
            L.append('The figure 2 drain (%d messages, default settings, nginx) of grelout %s and '
                     'of the current code, in the same run, run by run in alternating order '
                     '(1.0 first in odd runs). bench/run builds 1.0 from its commit (`git archive`) '
                     'and installs it into a copy of this PostgreSQL installation under the '
                     'run\'s temporary directory (same relative layout of bin, lib and share, so '
                     'the copy\'s server loads its own `grelout.so`: the relay ran %s); that '
                     'cluster has the same settings, runs only for this figure (after an '
                     'uncounted warm-up drain of a fifth of the backlog: the current cluster is '
                     'warm from the figures before), and each side\'s relays are paused while '
                     'the other drains.\n'
                     % (x['messages'], x['v10_revision'], x['v10_library']))
            L.append('| drain | median msgs/s | min | max |\n| --- | --- | --- | --- |')
            L.append(row3('grelout 1.0', x['v10']))
            L.append(row3('current', x['current']))
            L.append('')
            L.append('| run | first | 1.0 msgs/s | current msgs/s | current / 1.0 |')
            L.append('| --- | --- | --- | --- | --- |')
            for i, (a, b) in enumerate(zip(x['v10'], x['current'])):
                L.append('| %d | %s | %.0f | %.0f | %.2f |'
                         % (i + 1, '1.0' if i % 2 == 0 else 'current', a, b, b / a))
            L.append('')
            L.append('Ratio (current / 1.0), median of the runs\' ratios: **%.2f** (ratio of the '
                     'medians %.2f)\n' % (paired(x['current'], x['v10']),
                                          med(x['current']) / med(x['v10'])))
            if x.get('v10_relay_us') and x.get('current_relay_us'):
                L.append('Relay CPU time a delivery (user + system), median: %.1f us 1.0, '
                         '%.1f us current.\n' % (statistics.median(x['v10_relay_us']),
                                                  statistics.median(x['current_relay_us'])))
            L.append('Settings: 1.0 %s; current %s.\n' % (
                ', '.join('`%s = %s`' % kv for kv in sorted(x['v10_settings'].items())),
                ', '.join('`%s = %s`' % kv for kv in sorted(x['settings'].items()))))
    if '11' in f:
        x = f['11']
        L.append('## 11. Latency at %d msgs/s sustained\n' % x['rate'])
        L.append('As figure 4 (one message a transaction at %d msgs/s, the clock after COMMIT '
                 'against the receiver\'s clock), while pgbench -R publishers (4 clients, 10 '
                 '`outbox_publish` a transaction, to nginx) bring the total to %d msgs/s, from '
                 '2 s before the first probe to after the last; default settings. Delivered/s '
                 'and the backlog (pending + processing) are sampled every 0.5 s over the probes\' '
                 'window; sustained = delivered >= 95%% of the rate (or of what the publishers '
                 'reached, if less) and the backlog at most '
                 'max(1000, one second of messages). The receiver, the publishers and the '
                 'relays share the two cores. %d s of probes a run.\n'
                 % (x['probe_rate'], x['rate'], sz['latency_seconds']))
        L.append('| run | n | p50 ms | p95 ms | p99 ms | max ms | published/s | delivered/s '
                 '| max backlog | sustained |')
        L.append('| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |')
        for i, r in enumerate(x['runs']):
            L.append('| %d | %d | %.2f | %.2f | %.2f | %.2f | %.0f | %.0f | %d | %s |'
                     % (i + 1, r['n'], r['p50'], r['p95'], r['p99'], r['max'],
                        r['published_rate'], r['delivered_rate'], r['max_backlog'],
                        'yes' if r['bounded'] else 'no'))
        L.append('')
    if '12' in f:
        x = f['12']
        L.append('## 12. Backlog of an idle topic\n')
        L.append('The figure 2 drain (%d messages of topic `bench`, default settings) while '
                 '%d messages of another topic wait: of topic `idle.none`, which no handler '
                 'matches (routed `waiting`), then of topic `idle.off`, whose handler is '
                 'disabled (routed to it, pending); each backlog published with the relays '
                 'paused and routed (relays on until none is left unrouted) just before its '
                 'drain, and deleted after it. Against the same drain with neither: each run '
                 'drains all three, in an order rotated run by run.\n'
                 % (x['messages'], x['idle']))
        L.append('| drain | median msgs/s | min | max |\n| --- | --- | --- | --- |')
        L.append(row3('without an idle backlog', x['without']))
        L.append(row3('with %d messages of a topic with no handler' % x['idle'], x['none']))
        L.append(row3('with %d messages of a disabled handler' % x['idle'], x['disabled']))
        L.append('')
        L.append('| run | order | without | no handler | disabled | no handler / without '
                 '| disabled / without |')
        L.append('| --- | --- | --- | --- | --- | --- | --- |')
        for i, o in enumerate(x.get('order', [])):
            a, b, c = x['without'][i], x['none'][i], x['disabled'][i]
            L.append('| %d | %s | %.0f | %.0f | %.0f | %.2f | %.2f |'
                     % (i + 1, ', '.join(o), a, b, c, b / a, c / a))
        L.append('')
        L.append('Ratios (with / without), median of the runs\' ratios: no handler **%.2f**, '
                 'disabled handler **%.2f**.\n' % (paired(x['none'], x['without']),
                                                   paired(x['disabled'], x['without'])))
        L.append('The idle backlogs as routed (route, state: count): no handler %s; disabled %s.\n'
                 % (x.get('none_routes'), x.get('disabled_routes')))

    if '13' in f:
        x = f['13']
        L.append('## 13. The HTTP engine alone\n')
        if 'missing' in x:
            L.append('Not measured (%s).\n' % x['missing'])
        else:
            L.append('The relay\'s HTTP engine without PostgreSQL: `bench/http_engine.c`, built '
                     'from the same `src/pure/http.c` as the relay (libcurl\'s multi interface, its '
                     'epoll set, reused handles), sends %d POSTs of figure 2\'s payload with '
                     'the headers a relay sends to the same nginx, %d in flight (the default '
                     '`grelout.concurrency`), each answered request replaced at once; the first '
                     'tenth is not timed. Its CPU (user + system, the driver\'s process only) is '
                     'what the HTTP side of one delivery costs a relay, so its rate is the most '
                     'one relay could deliver if its database work cost nothing. Run by run '
                     'beside `wrk -c %d`.\n' % (x['requests'], x['conns'], x['conns']))
            L.append('| | median | min | max |\n| --- | --- | --- | --- |')
            L.append(row3('HTTP engine alone, req/s', x['engine']))
            L.append(row3('its CPU a request, us', x['cpu_us'], 1))
            L.append(row3('wrk -c %d, req/s' % x['conns'], x['wrk']))
            L.append(row3('epoll changes in the timed requests', x['watch_changes']))
            L.append('')
            line = ('Ratio (engine alone / wrk), median of the runs\' ratios: **%.2f**.'
                    % paired(x['engine'], x['wrk']))
            relay = [c['relay_us'] for c in res.get('drain_cpu', [])
                     if c['label'].startswith('default run')]
            if '2' in f and relay:
                line += (' Figure 2\'s default drain: %.0f msgs/s, relay CPU %.1f us a delivery '
                         '(median), of which the engine alone accounts for %.1f us (%.0f%%).'
                         % (med(f['2']['default']), med(relay), med(x['cpu_us']),
                            100.0 * med(x['cpu_us']) / med(relay)))
            L.append(line + '\n')

    # the targets of issue 14
    absent = lambda fig: 'not in this run (figure %s)' % fig

    def target(name, goal, fig, measure):
        if fig not in f:
            T.append((name, goal, absent(fig), '-'))
        else:
            T.append((name, goal) + measure(f[fig]))

    def t10(x):
        if 'missing' in x:
            return 'not measured (%s)' % x['missing'], '-'
        r = paired(x['current'], x['v10'])
        return ('%.2f x (median of the runs\' ratios; medians %.0f against %.0f msgs/s)'
                % (r, med(x['current']), med(x['v10'])),
                'yes' if r >= 2 else 'no')
    target('10. drain vs 1.0', 'default settings >= 2 x 1.0 in the same run', '10', t10)

    def t2(x):
        conns = x.get('default_conns', 50)
        r = med(x['default']) / med(x['wrk_default'])
        return ('%.2f x (%.0f msgs/s against wrk -c %d %.0f req/s)'
                % (r, med(x['default']), conns, med(x['wrk_default'])),
                'yes' if r >= 0.25 else 'no')
    target('2. drain vs wrk', 'default settings >= 0.25 x wrk with the same connection '
           'count (grelout.workers x grelout.concurrency)', '2', t2)

    def t1(x):
        r = med(x['ratio_grelout'])
        return '%.2f x' % r, 'yes' if r >= 0.97 else 'no'
    target('1. publish', 'INSERT + `outbox_publish` >= 0.97 x INSERT + plain INSERT', '1', t1)

    def t4(x):
        p99 = med([r['p99'] for r in x['grelout']])
        return ('%.2f ms (median of runs; worst %.2f)'
                % (p99, max(r['p99'] for r in x['grelout'])), 'yes' if p99 <= 2 else 'no')
    target('4. latency', 'p99 <= 2 ms at 50 msgs/s', '4', t4)

    def t11(x):
        p99 = med([r['p99'] for r in x['runs']])
        held = sum(1 for r in x['runs'] if r['bounded']) * 2 > len(x['runs'])
        ok = p99 <= 10 and held
        return ('%.2f ms (median of runs; worst %.2f)%s'
                % (p99, max(r['p99'] for r in x['runs']),
                   '' if held else '; the rate was not sustained'), 'yes' if ok else 'no')
    target('11. loaded latency', 'p99 <= 10 ms at %s msgs/s sustained'
           % format(f.get('11', {}).get('rate', 5000), ','), '11', t11)

    def t12(kind, label):
        def m(x):
            r = paired(x[kind], x['without'])
            return ('%.2f x (median of the runs\' ratios; medians %.0f against %.0f msgs/s)'
                    % (r, med(x[kind]), med(x['without']))), 'yes' if r >= 0.95 else 'no'
        target('12. %s' % label, 'a 100,000-message backlog of it costs the other topics\' '
               'drain < 5% (ratio >= 0.95)', '12', m)
    t12('none', 'topic with no handler')
    t12('disabled', 'disabled handler')
    have = [('1 (captured INSERT)', '1' in f and 'ratio_capture' in f['1']), ('7', '7' in f),
            ('8', '8' in f), ('9', '9' in f)]
    moved, held = regression_11(res, quick)
    present = all(h for _, h in have)
    T.append(('1, 7, 8, 9: 1.1 figures', 'capture, fan-out, noisy-neighbour and ordered '
              'figures in this report; none regresses (no in-run ratio more than 10% below the previous report\'s)',
              'present: %s; missing: %s; %s'
              % (', '.join(n for n, h in have if h) or 'none',
                 ', '.join(n for n, h in have if not h) or 'none', moved),
              '-' if held is None and present else
              'yes' if present and held else 'no'))
    # the target's sizes in a full run; a quick or narrowed run says what it measured
    if sz.get('idle_backlog') != 100_000 or sz.get('loaded_rate') != 5_000:
        T.append(('note', 'sizes of this run', 'idle backlog %d, loaded rate %d msgs/s'
                  % (sz.get('idle_backlog', 0), sz.get('loaded_rate', 0)), '-'))
    return L, T


AUTH_NAMES = {'hmac': 'HMAC (`whsec_`, v1)', 'v1a': 'ed25519 (`whsk_`, v1a)',
              'mtls': 'mutual TLS (client certificate) + HMAC',
              'oauth': 'OAuth2 client credentials + HMAC'}
AUTH_TARGET = 0.9     # issue 34: each way >= 0.9 x the HMAC drain


def render_issue34(res, sz):
    """figure 14's section and the issue 34 targets table, as two lists of
    markdown lines (both empty without figure 14)."""
    f = res['figures']
    if '14' not in f:
        return [], []
    x = f['14']
    L, T = ['## 14. Endpoint authentication\n'], []
    if 'missing' in x:
        L.append('Not measured (%s).\n' % x['missing'])
        T.append(('14. endpoint authentication', 'v1a, mTLS, OAuth2 drains >= %.1f x HMAC'
                  % AUTH_TARGET, 'not measured (%s)' % x['missing'], '-'))
        return L, T
    med = lambda v: stats(v)[0]
    paired = lambda a, b: statistics.median(p / q for p, q in zip(a, b))
    kinds = [k for k in ('hmac', 'v1a', 'mtls', 'oauth') if x.get(k)]
    L.append('The figure 2 drain (%d messages, default settings) over HTTPS to nginx (%s, '
             '%s as curl negotiates it by ALPN; a server certificate of a CA the run makes '
             'with openssl, trusted through `grelout.ca_file`; `ssl_verify_client optional` '
             'with a client CA), one handler each way: HMAC (`whsec_` secret, `v1` '
             'signatures: the baseline), ed25519 (`whsk_` key from '
             '`grelout.new_signing_key()`, `v1a`), mutual TLS (`tls_client_cert` and '
             '`tls_client_key`, plus an HMAC secret as the baseline has) and OAuth2 client '
             'credentials (`oauth` naming nginx\'s `/token`, a static token that expires in '
             '3600 s, plus an HMAC secret). nginx checks each: the signature\'s version, '
             '`$ssl_client_verify = SUCCESS`, the bearer token; any other answer would be a '
             'failure and the drain would not end. After one uncounted warm-up drain of a '
             'tenth of the backlog to each (connections, TLS sessions and the token made), '
             'each run drains all four, in an order rotated run by run; each ratio is to the '
             'HMAC drain of the same run, the median of the runs\' ratios. "connections" is '
             'what nginx accepted during a drain (stub_status), "tokens" the requests to '
             '`/token`: both 0 when connections and the token are reused; "retries" the failed '
             'attempts (the most of any run; 0 expected). nginx reads each request\'s body '
             'before it answers (see `bench/run`).\n'
             % (x['messages'], x['url'], x.get('protocol') or 'HTTP version unknown'))
    L.append('| handler | median msgs/s | min | max | ratio to HMAC | relay CPU us a delivery '
             '| connections a drain | token requests a drain | retries a drain |')
    L.append('| --- | --- | --- | --- | --- | --- | --- | --- | --- |')
    for k in kinds:
        m, lo, hi = stats(x[k])
        cpu = x.get('relay_us', {}).get(k) or []
        L.append('| %s | %.0f | %.0f | %.0f | %s | %s | %s | %s | %s |'
                 % (AUTH_NAMES[k], m, lo, hi,
                    '1 (baseline)' if k == 'hmac' else '%.2f' % paired(x[k], x['hmac']),
                    '%.1f' % med(cpu) if cpu else '-',
                    max(x['connections'][k]) if x['connections'].get(k) else '-',
                    max(x['tokens'][k]) if x['tokens'].get(k) else '-',
                    max(x['failures'][k]) if x.get('failures', {}).get(k) else '-'))
    L.append('')
    L.append('| run | order | %s |' % ' | '.join(kinds + ['%s / hmac' % k for k in kinds[1:]]))
    L.append('| --- | --- |%s' % (' --- |' * (2 * len(kinds) - 1)))
    for i, o in enumerate(x.get('order', [])):
        L.append('| %d | %s | %s | %s |'
                 % (i + 1, ', '.join(o), ' | '.join('%.0f' % x[k][i] for k in kinds),
                    ' | '.join('%.2f' % (x[k][i] / x['hmac'][i]) for k in kinds[1:])))
    L.append('')
    # reused: no drain opened more connections than a relay has requests in
    # flight, nor asked for a token more than once (it expires in an hour)
    conns = x.get('concurrency', 50)
    for k in kinds[1:]:
        r = paired(x[k], x['hmac'])
        reused = max(x['connections'][k]) <= conns and max(x['tokens'][k]) <= 1
        T.append(('14. %s' % AUTH_NAMES[k], 'drain >= %.1f x the HMAC drain over HTTPS, '
                  'connections (at most %d a drain) and tokens (at most 1) reused'
                  % (AUTH_TARGET, conns),
                  '%.2f x (median of the runs\' ratios; medians %.0f against %.0f msgs/s; '
                  'at most %d connections and %d token requests a drain)'
                  % (r, med(x[k]), med(x['hmac']), max(x['connections'][k]),
                     max(x['tokens'][k])),
                  'yes' if r >= AUTH_TARGET and reused else 'no'))
    if sz.get('auth_backlog') != FULL['auth_backlog']:
        T.append(('note', 'sizes of this run', 'backlog %d' % x['messages'], '-'))
    return L, T


def render_issue32(res, sz):
    """figures 16 to 19's sections and the issue 32 targets table, as two
    lists of markdown lines (empty without those figures)."""
    f = res['figures']
    L, T = [], []
    med = lambda v: stats(v)[0]
    paired = lambda a, b: statistics.median(p / q for p, q in zip(a, b))
    if '16' in f:
        x = f['16']
        L.append('## 16. An endpoint 100 ms away\n')
        L.append('The drain of %d messages at default settings (`grelout.concurrency` %s) to '
                 'nginx\'s `/far`, which reads each POST\'s body and answers 204 100 ms later '
                 '(the echo module\'s `echo_sleep 0.1`), beside `wrk -c%d` (the same POST, '
                 'the ceiling: %d connections each busy 100 ms) and graphile-worker at its '
                 'defaults (concurrency 1, %d jobs); then the same over HTTPS (%s, a CA the '
                 'run makes), set beside the same ceiling (wrk speaks HTTP/1.1 only, and '
                 'over TLS cannot hold that many connections on this machine). pg_net: %s.\n'
                 % (x['messages'], x['concurrency'], x['conns'], x['conns'],
                    x['graphile_jobs'], x.get('protocol') or 'HTTP version unknown',
                    x['pg_net']))
        L.append('| system | median msgs/s | min | max |\n| --- | --- | --- | --- |')
        L.append(row3('grelout, HTTP/1.1', x['http']))
        L.append(row3('wrk -c%d, HTTP/1.1' % x['conns'], x['wrk']))
        L.append(row3('graphile-worker, defaults', x['graphile'], 1))
        if x['https']:
            L.append(row3('grelout, HTTPS', x['https']))
        L.append('')
        L.append('Retries in a drain (the most of any run): %d over HTTP, %s over HTTPS.\n'
                 % (max(x['failures']), max(x['failures_https']) if x['failures_https'] else '-'))
        r = paired(x['http'], x['wrk'])
        T.append(('16. far', 'drain >= 0.5 x wrk -c%d against the same endpoint' % x['conns'],
                  '%.2f x (%.0f against %.0f msgs/s)' % (r, med(x['http']), med(x['wrk'])),
                  'yes' if r >= 0.5 else 'no'))
        g = med(x['http']) / med(x['graphile'])
        T.append(('16. far', 'drain >= 10 x graphile-worker and pg_net at their defaults',
                  '%.0f x graphile-worker (%.1f jobs/s); pg_net %s'
                  % (g, med(x['graphile']), x['pg_net']), 'yes' if g >= 10 else 'no'))
        if x['https']:
            r = paired(x['https'], x['wrk'])
            T.append(('16. far, HTTPS', 'drain over HTTPS (%s) >= 0.4 x the ceiling'
                      % (x.get('protocol') or '?'),
                      '%.2f x wrk -c%d (%.0f against %.0f)'
                      % (r, x['conns'], med(x['https']), med(x['wrk'])),
                      'yes' if r >= 0.4 else 'no'))
    if '17' in f:
        x = f['17']
        L.append('## 17. An endpoint with a knee\n')
        L.append('The drain of %d messages at default settings to nginx\'s `/knee`, which '
                 'answers at most %d requests a second (`limit_req`, a burst of a million: '
                 'the rest wait in its queue, none refused), so that an answer\'s latency '
                 'grows with the requests in flight. A request that timed out would be a '
                 'retry.\n' % (x['messages'], x['limit']))
        L.append('| run | msgs/s | retries | handler\'s last error |\n| --- | --- | --- | --- |')
        for i, v in enumerate(x['rates']):
            L.append('| %d | %.0f | %d | %s |' % (i + 1, v, x['failures'][i],
                                                 x['errors'][i] or '-'))
        L.append('')
        m = med(x['rates'])
        T.append(('17. knee', 'deliveries/s >= 0.9 x %d, no request timing out' % x['limit'],
                  '%.0f/s (%.2f x), %d retries at most' % (m, m / x['limit'], max(x['failures'])),
                  'yes' if m >= 0.9 * x['limit'] and max(x['failures']) == 0 else 'no'))
    if '18' in f:
        x = f['18']
        L.append('## 18. All the cores\n')
        if 'missing' in x:
            L.append('Not measured (%s).\n' % x['missing'])
            T.append(('18. near', 'default drain >= 1.8 x one relay\'s', 'not measured', '-'))
        else:
            L.append('The figure 2 drain of %d messages to instant nginx at default settings '
                     '(`grelout.max_workers` %s: relays added while one is saturated), against '
                     'the same with `grelout.max_workers = 1` (one relay), interleaved run by '
                     'run; relay CPU is all relays\' CPU over the deliveries.\n'
                     % (x['messages'], x['max_workers']))
            L.append('| drain | median msgs/s | min | max | relay CPU us a delivery |')
            L.append('| --- | --- | --- | --- | --- |')
            for k, label in (('one', 'one relay'), ('default', 'default')):
                m, lo, hi = stats(x[k])
                L.append('| %s | %.0f | %.0f | %.0f | %.1f |'
                         % (label, m, lo, hi, med(x['relay_us_' + k])))
            L.append('')
            L.append('Relays after each default drain: %s.\n'
                     % ', '.join(str(v) for v in x['relays']))
            r = paired(x['default'], x['one'])
            cpu_d, cpu_1 = med(x['relay_us_default']), med(x['relay_us_one'])
            T.append(('18. near', 'default drain >= 1.8 x one relay\'s, relay CPU a delivery '
                      'not above one relay\'s (10% spread)',
                      '%.2f x; %.1f against %.1f us a delivery' % (r, cpu_d, cpu_1),
                      'yes' if r >= 1.8 and cpu_d <= 1.1 * cpu_1 else 'no'))
    if '19' in f:
        x = f['19']
        L.append('## 19. Latency at %d msgs/s\n' % x['rate'])
        L.append('Figure 4\'s measurement (one message a transaction, the publisher\'s clock '
                 'after COMMIT, the receiver\'s when the request has arrived) at %d msgs/s.\n'
                 % x['rate'])
        L.append('| run | n | p50 ms | p95 ms | p99 ms | max ms |\n| --- | --- | --- | --- | --- | --- |')
        for i, r in enumerate(x['grelout']):
            L.append('| %d | %d | %.2f | %.2f | %.2f | %.2f |'
                     % (i + 1, r['n'], r['p50'], r['p95'], r['p99'], r['max']))
        L.append('')
        # (at 50 msgs/s: figure 4's, in the issue 14 table)
        p99 = med([r['p99'] for r in x['grelout']])
        T.append(('19. latency', 'commit-to-webhook p99 < 2 ms at %d msgs/s (at 50: figure 4, '
                  'issue 14\'s table)' % x['rate'],
                  '%.2f ms (median of the runs\' p99)' % p99, 'yes' if p99 < 2 else 'no'))
    return L, T


LOG_TARGET_ALL = 0.85      # issue 33: log_attempts = all >= 0.85 x off
LOG_TARGET_FAILED = 0.95   # issue 33: the default, healthy endpoint: no measurable cost


def render_issue33(res, sz):
    """figure 15's section and the issue 33 targets table, as two lists of
    markdown lines (both empty without figure 15)."""
    f = res['figures']
    if '15' not in f:
        return [], []
    x = f['15']
    med = lambda v: stats(v)[0]
    paired = lambda a, b: statistics.median(p / q for p, q in zip(a, b))
    modes = [m for m in ('off', 'failed', 'all') if x.get(m)]
    L, T = ['## 15. Attempt log\n'], []
    L.append('The figure 2 drain (%d messages of topic `bench`, default settings, nginx '
             'answering 204) with `grelout.log_attempts = off`, `= failed` (the default: a '
             'healthy endpoint\'s attempts are not logged) and `= all` (one `grelout.attempts` '
             'row a delivery, inserted by each settle statement for the deliveries it '
             'changed). Each run drains all three, in an order rotated run by run, the '
             'log emptied before each drain; each ratio is to the `off` drain of the same run, '
             'the median of the runs\' ratios. "logged" is the rows the drain left in '
             '`grelout.attempts` (`all`: one a delivery; otherwise 0).\n' % x['messages'])
    L.append('| log_attempts | median msgs/s | min | max | ratio to off | relay CPU us a delivery '
             '| logged a drain | retries a drain |')
    L.append('| --- | --- | --- | --- | --- | --- | --- | --- |')
    for m in modes:
        mm, lo, hi = stats(x[m])
        cpu = x.get('relay_us', {}).get(m) or []
        L.append('| %s | %.0f | %.0f | %.0f | %s | %s | %s | %s |'
                 % (m, mm, lo, hi, '1 (baseline)' if m == 'off' else '%.2f' % paired(x[m], x['off']),
                    '%.1f' % med(cpu) if cpu else '-',
                    max(x['logged'][m]) if x.get('logged', {}).get(m) else '-',
                    max(x['failures'][m]) if x.get('failures', {}).get(m) else '-'))
    L.append('')
    L.append('| run | order | off | failed | all | failed / off | all / off |')
    L.append('| --- | --- | --- | --- | --- | --- | --- |')
    for i, o in enumerate(x.get('order', [])):
        L.append('| %d | %s | %.0f | %.0f | %.0f | %.2f | %.2f |'
                 % (i + 1, ', '.join(o), x['off'][i], x['failed'][i], x['all'][i],
                    x['failed'][i] / x['off'][i], x['all'][i] / x['off'][i]))
    L.append('')
    r_all, r_failed = paired(x['all'], x['off']), paired(x['failed'], x['off'])
    L.append('Ratios to `off`, median of the runs\' ratios: all **%.2f**, failed **%.2f**.\n'
             % (r_all, r_failed))
    T.append(('15. log_attempts = all', 'drain >= %.2f x the drain with `off`' % LOG_TARGET_ALL,
              '%.2f x (median of the runs\' ratios; medians %.0f against %.0f msgs/s)'
              % (r_all, med(x['all']), med(x['off'])), 'yes' if r_all >= LOG_TARGET_ALL else 'no'))
    T.append(('15. log_attempts = failed (default)', 'no measurable cost with a healthy endpoint: '
              'drain >= %.2f x `off`, nothing logged' % LOG_TARGET_FAILED,
              '%.2f x (medians %.0f against %.0f msgs/s); %d rows logged'
              % (r_failed, med(x['failed']), med(x['off']), max(x['logged']['failed'])),
              'yes' if r_failed >= LOG_TARGET_FAILED and max(x['logged']['failed']) == 0 else 'no'))
    if sz.get('log_backlog') != FULL['log_backlog']:
        T.append(('note', 'sizes of this run', 'backlog %d' % x['messages'], '-'))
    return L, T


def render_issue11(res, sz):
    """figure 8's section and the issue 11 targets table, as two lists of
    markdown lines (both empty without figure 8)."""
    f = res['figures']
    if '8' not in f:
        return [], []
    x = f['8']
    L, T = [], []
    med = lambda v: stats(v)[0]
    paired = lambda a, b: statistics.median(p / q for p, q in zip(a, b))
    names = {'alone': 'healthy alone', 'beside': 'beside the hanging endpoint',
             'breaker_off': 'beside it, breaker off'}
    kinds = x['kinds']
    L.append('## 8. Noisy neighbour\n')
    L.append('A healthy handler beside one whose endpoint hangs: `bench.py receiver` with a '
             'delay, which answers each request %.0f s after it came, later than '
             '`grelout.request_timeout` (%d ms, the default), so every request to it times out '
             '(and is held until then). Default settings (one relay, `concurrency = %d`). '
             'Each run measures every kind, in an order rotated run by run: **alone** (no '
             'hanging handler), **beside** it (default breaker), and beside it with '
             '`grelout.breaker_threshold = 0` (**breaker off**, for information: what the fair '
             'slots do without the breaker). For each kind beside, the hanging handler (a new '
             'name each time, so its breaker starts closed) is created disabled, its backlog of '
             '%d messages published and routed to it with the relays on (a disabled handler is '
             'sent nothing), the relays paused and the handler enabled: a routed backlog, all '
             'due, as a hanging endpoint accumulates; it is deleted after the measurement, '
             'the hanging endpoint dropping what it holds so the pause does not wait for the '
             'timeouts.\n'
             % (x['hang_s'], x['timeout_ms'], x['concurrency'], x['hang_backlog']))
    L.append('- **Drain**: the figure 2 drain (%d messages of topic `bench` to nginx, '
             'published with the relays paused, timed from the reload that turns them on, '
             'every message checked as arrived at nginx), the hanging backlog due from the '
             'same reload (published before, so older); a drain not done in %.0f s is cut '
             'there (starved).\n'
             '- **Latency**: the figure 4 latency (%d msgs/s for %d s, one message a '
             'transaction, to the latency receiver), the relays turned on with a fresh '
             'hanging backlog up to 2 s before the probes start (until the hanging endpoint '
             'has as many requests as the relay has slots), so the hanging requests already '
             'hold the slots when the first probe is committed.\n'
             % (x['messages'], x['limit'], x['rate'], x['seconds']))
    L.append('| drain | median deliveries/s | min | max | relay CPU a delivery (median) |')
    L.append('| --- | --- | --- | --- | --- |')
    prefix = {'alone': 'healthy alone run', 'beside': 'beside a hang run',
              'breaker_off': 'beside, breaker off run'}
    for k in kinds:
        cpu = [c['relay_us'] for c in res.get('drain_cpu', [])
               if c['label'].startswith(prefix[k])]
        L.append(row3(names[k], x['drain'][k]) +
                 (' %.1f us |' % statistics.median(cpu) if cpu else ' - |'))
    L.append('')
    head = ' | '.join(names[k] for k in kinds)
    ratios = [k for k in kinds if k != 'alone']
    L.append('| run | order | %s | %s |' % (head, ' | '.join('%s / alone' % k.replace('_', ' ')
                                                              for k in ratios)))
    L.append('|' + ' --- |' * (2 + len(kinds) + len(ratios)))
    for i, o in enumerate(x['order']):
        cells = ['%.0f%s' % (x['drain'][k][i], '' if x['complete'][k][i] else ' (cut)')
                 for k in kinds]
        cells += ['%.2f' % (x['drain'][k][i] / x['drain']['alone'][i]) for k in ratios]
        L.append('| %d | %s | %s |' % (i + 1, ', '.join(o), ' | '.join(cells)))
    L.append('')
    for k in ratios:
        r = paired(x['drain'][k], x['drain']['alone'])
        if k == 'beside':
            L.append(ratio_line('noisy neighbour', r) + '\n')
        else:
            L.append('Drain ratio (%s / alone), median of the runs\' ratios: **%.2f**.\n'
                     % (names[k], r))
    L.append('| latency | run | n | p50 ms | p95 ms | p99 ms | max ms | never arrived '
             '| hanging requests before the probes |')
    L.append('| --- | --- | --- | --- | --- | --- | --- | --- | --- |')
    for k in kinds:
        for i, r in enumerate(x['latency'][k]):
            L.append('| %s | %d | %d | %.2f | %.2f | %.2f | %.2f | %d | %s |'
                     % (names[k], i + 1, r['n'], r['p50'], r['p95'], r['p99'], r['max'],
                        r.get('missing', 0), '-' if k == 'alone' else r.get('hang_before', 0)))
    L.append('')
    if ratios:
        L.append('The hanging endpoint: requests it received (during the drain, during the '
                 'latency run) and its handler\'s `grelout.handler_status` at the end of each, '
                 'before the relays are paused (breaker, consecutive failures, in flight, '
                 'pending, dead; - when the view does not exist):\n')
        L.append('| kind | run | requests in the drain | requests in the latency run '
                 '| after the drain | after the latency run |')
        L.append('| --- | --- | --- | --- | --- | --- |')
        show = lambda st: '-' if st is None else ', '.join(str(v) for v in st)
        for k in ratios:
            for i, (a, b) in enumerate(x['hang_requests'][k]):
                st = x['hang_state'][k][i]
                L.append('| %s | %d | %d | %d | %s | %s |'
                         % (names[k], i + 1, a, b, show(st[0]), show(st[1])))
        L.append('')
    if not x['has_breaker']:
        L.append('Breaker off: not measured (this build has no `grelout.breaker_threshold`).\n')

    def cut(k):
        n = sum(1 for c in x['complete'][k] if not c)
        return '' if not n else '; %d of %d drains cut after %.0f s (starved)' % (
            n, len(x['complete'][k]), x['limit'])

    def p99(k):
        return med([r['p99'] for r in x['latency'][k]])
    r = paired(x['drain']['beside'], x['drain']['alone'])
    T.append(('8. noisy neighbour, drain', 'healthy deliveries/s beside an endpoint that hangs '
              'past the timeout with a %s backlog >= 0.8 x alone' % format(x['hang_backlog'], ','),
              '%.2f x (median of the runs\' ratios; medians %.0f against %.0f deliveries/s)%s'
              % (r, med(x['drain']['beside']), med(x['drain']['alone']), cut('beside')),
              'yes' if r >= 0.8 and not cut('beside') else 'no'))
    pb = p99('beside')
    T.append(('8. noisy neighbour, latency', 'p99 <= 10 ms at %d msgs/s beside it' % x['rate'],
              '%.2f ms (median of runs; worst %.2f; alone %.2f)'
              % (pb, max(r['p99'] for r in x['latency']['beside']), p99('alone')),
              'yes' if pb <= 10 else 'no'))
    if 'breaker_off' in kinds:
        T.append(('8. breaker off (information)', 'the same with `grelout.breaker_threshold = 0`',
                  'drain %.2f x alone%s; p99 %.2f ms'
                  % (paired(x['drain']['breaker_off'], x['drain']['alone']), cut('breaker_off'),
                     p99('breaker_off')), '-'))
    if sz.get('hang_backlog') != 20_000 or sz.get('backlog') != 100_000:
        T.append(('note', 'sizes of this run', 'healthy backlog %d, hanging backlog %d'
                  % (sz.get('backlog', 0), sz.get('hang_backlog', 0)), '-'))
    return L, T


def render(res, sz, quick):
    L = []
    m = res['machine']
    L.append('# grelout benchmark results\n')
    if quick:
        L.append('**Quick smoke run (`bench/run --quick`): tiny sizes, one run each. '
                 'These numbers only show that the harness works.**\n')
    L.append('**Measured on PostgreSQL %d**: every figure in this report (`%s`), with '
             'grelout built and installed in %s; the peers (nginx, wrk, pgbench, '
             'graphile-worker, the receivers, bench.py) ran on the host.\n'
             % (m['pg_major'], m['postgres'].split(' on ')[0], m['built_in']))
    L.append('Produced by `make bench%s` (`bench/run%s`) in %.1f minutes.\n'
             % ('' if m['pg_major'] == 15 else ' PG=%d' % m['pg_major'],
                '' if m['pg_major'] == 15 else ' --pg %d' % m['pg_major'], res['elapsed'] / 60))
    L.append('## Machine\n')
    L.append('| | |\n| --- | --- |')
    for k, label in (('revision', 'grelout measured'), ('cpu', 'CPU'), ('cores', 'cores'), ('memory', 'memory'),
                     ('kernel', 'kernel'), ('os', 'OS'), ('pg_major', 'PostgreSQL measured'),
                     ('postgres', 'PostgreSQL'), ('built_in', 'grelout built in'),
                     ('relay_curl', 'relay\'s libcurl'),
                     ('curl', 'curl'), ('nginx', 'nginx'), ('wrk', 'wrk'),
                     ('node', 'Node'), ('graphile', 'graphile-worker')):
        L.append('| %s | %s |' % (label, m[k]))
    L.append('')
    L.append('## Settings\n')
    L.append('- PostgreSQL: %s; `shared_preload_libraries = grelout`, '
             '`grelout.database = bench`, `max_connections = 200`, '
             'checkpoints kept out of the windows (`max_wal_size = 8GB`, `checkpoint_timeout = 30min`).'
             % ', '.join('`%s = %s`' % kv for kv in m['settings'].items()))
    L.append('- Receiver: nginx on 127.0.0.1, `location / { return 204; }`, keep-alive '
             '(`keepalive_requests 10000000`), `access_log off`, `worker_processes auto`, '
             '`worker_connections 8192`.')
    L.append('- Payload: %d bytes of JSON text (an order event).' % res.get('payload_len', 0))
    L.append('- grelout default settings: `grelout.workers = 1`, `concurrency = 50`, '
             '`batch_size = 100`.')
    L.append('- grelout tuned settings: %s.' % ', '.join('`%s = %s`' % kv for kv in TUNED.items()))
    L.append('- graphile-worker %s: one Node process, `concurrency = 50`, pool of 52 connections, '
             'task `post` = `fetch` POST (Node %s global fetch, keep-alive) to the same nginx.'
             % (m['graphile'], m['node']))
    L.append('- wrk: 2 threads, POST of the same payload with grelout-like headers '
             '(lua script), %d s a run.' % sz['wrk_seconds'])
    L.append('- Each figure: median of %d runs, with min and max.\n' % sz['runs'])

    f = res['figures']
    targets = []
    if '1' in f:
        x = f['1']
        L.append('## 1. Publish overhead\n')
        L.append('pgbench, 4 clients, -M prepared, %d s a run, %d runs of each; a transaction = '
                 'one business INSERT plus the enqueue, or (captured INSERT) one INSERT into a '
                 'table with the same columns captured by `grelout.capture` (default events; '
                 'its trigger publishes the row, %d bytes of JSON text, key = its id; one '
                 'statement a transaction fewer than the others); the '
                 'variants are interleaved run '
                 'by run in rotated order; ratios are taken within each round '
                 '(tables emptied and a CHECKPOINT before each run); relays paused '
                 '(`grelout.relay = off`) and no handler for the topic.\n'
                 % (sz['publish_seconds'], sz['publish_runs'], x.get('capture_payload_len', 0)))
        L.append('| variant | median TPS | min | max |\n| --- | --- | --- | --- |')
        L.append(row3('INSERT + plain INSERT (copy of grelout.outbox)', x['tps']['plain']))
        L.append(row3('INSERT + `outbox_publish`', x['tps']['grelout']))
        L.append(row3('INSERT + `graphile_worker.add_job`', x['tps']['graphile']))
        if 'capture' in x['tps']:
            L.append(row3('INSERT into a captured table', x['tps']['capture']))
        L.append('')
        L.append('| ratio to plain INSERT | median | min | max |\n| --- | --- | --- | --- |')
        L.append(row3('grelout', x['ratio_grelout'], 2))
        L.append(row3('graphile-worker', x['ratio_graphile'], 2))
        if 'ratio_capture' in x:
            L.append(row3(CAPTURED_ROW, x['ratio_capture'], 2))
        L.append('')
        g = stats(x['ratio_grelout'])[0]
        targets.append(('1. publish overhead', 'grelout >= 0.90 x plain INSERT TPS',
                        '%.2f x (graphile-worker %.2f x)' % (g, stats(x['ratio_graphile'])[0]),
                        g >= 0.9))
        if 'ratio_capture' in x:
            c = stats(x['ratio_capture'])[0]
            targets.append(('1. captured INSERT', 'captured INSERT >= 0.85 x plain INSERT TPS',
                            '%.2f x (INSERT + `outbox_publish` %.2f x)' % (c, g), c >= 0.85))
    if '2' in f:
        x = f['2']
        L.append('## 2. Delivery throughput\n')
        L.append('A backlog of %d messages published with the relays paused '
                 '(`grelout.relay = off`), then `on` + `pg_reload_conf()`; timed from the reload '
                 'to the last settled delivery (the relays\' own counters); every message '
                 'checked as arrived at nginx (stub_status). graphile-worker: the jobs added '
                 'with `add_job` while no worker runs, then one worker process started and timed '
                 'until its jobs table is empty. Each queue table gets a `VACUUM ANALYZE` once '
                 'its backlog is in.\n' % sz['backlog'])
        L.append('| system | backlog | median msgs/s | min | max |\n| --- | --- | --- | --- | --- |')
        for key, name, n in (('default', 'grelout, default settings', sz['backlog']),
                             ('tuned', 'grelout, tuned settings', sz['backlog']),
                             ('graphile', 'graphile-worker, concurrency 50',
                              x.get('graphile_backlog', 0))):
            if key in x:
                mm, lo, hi = stats(x[key])
                note = ' (smaller: too slow for the time budget)' if key == 'graphile' and \
                    n < sz['backlog'] else ''
                L.append('| %s | %d%s | %.0f | %.0f | %.0f |' % (name, n, note, mm, lo, hi))
        L.append('')
        L.append('| HTTP ceiling (wrk) | median req/s | min | max |\n| --- | --- | --- | --- |')
        L.append(row3('wrk -c %d (default concurrency)' % x.get('default_conns', 50),
                      x['wrk_default']))
        if 'wrk_tuned' in x:
            L.append(row3('wrk -c %d (tuned workers x concurrency)' % x['tuned_conns'],
                          x['wrk_tuned']))
        L.append('')
        L.append('| ratio | median |\n| --- | --- |')
        d = stats(x['default'])[0]
        L.append('| grelout default / wrk -c %d | %.2f |' % (x.get('default_conns', 50),
                                                            d / stats(x['wrk_default'])[0]))
        best = d
        if 'tuned' in x:
            t = stats(x['tuned'])[0]
            best = max(best, t)
            L.append('| grelout tuned / wrk -c %d | %.2f |'
                     % (x['tuned_conns'], t / stats(x['wrk_tuned'])[0]))
        if 'graphile' in x:
            L.append('| grelout default / graphile-worker | %.1f |' % (d / stats(x['graphile'])[0]))
        L.append('')
        targets.append(('2. delivery throughput', '>= 10,000 msgs/s (default or tuned)',
                        '%.0f msgs/s default, %s tuned' % (
                            d, '%.0f' % stats(x['tuned'])[0] if 'tuned' in x else '-'),
                        best >= 10000))
    if '3' in f:
        x = f['3']
        L.append('## 3. Sustained rate\n')
        L.append('pgbench -R publishers (4 clients, 10 `outbox_publish` a transaction, durable '
                 'commits) at steady rates while the relays (tuned settings) deliver. Bounded = '
                 'the pending+processing count stays at or under max(1000, one second of '
                 'messages) through the second half of the window and the publishers reach '
                 '95%% of the rate. Probes of %d s pick the candidate from the ladder %s; '
                 'confirmation runs hold it for %d s. The publishers and their backends share the '
                 'two cores with the relays, nginx and PostgreSQL, so the rate found is what this '
                 'machine sustains end to end, not a ceiling of the relays alone.\n'
                 % (sz['probe_seconds'], ', '.join(str(v) for v in x['ladder']),
                    sz['confirm_seconds']))
        L.append('| step | target msgs/s | published/s | delivered/s | max backlog | end backlog | bounded |')
        L.append('| --- | --- | --- | --- | --- | --- | --- |')
        for r in x['probes']:
            L.append('| probe %ds | %d | %.0f | %.0f | %d | %d | %s |' % (
                r['seconds'], r['rate'], r['published_rate'], r['delivered_rate'],
                r['max_backlog'], r['end_backlog'],
                'yes' if r['bounded'] else 'no (%s)' % r.get('why', '')))
        for c in x['confirms']:
            for r in c['runs']:
                L.append('| confirm %ds | %d | %.0f | %.0f | %d | %d | %s |' % (
                    r['seconds'], r['rate'], r['published_rate'], r['delivered_rate'],
                    r['max_backlog'], r['end_backlog'],
                    'yes' if r['bounded'] else 'no (%s)' % r.get('why', '')))
        L.append('')
        if x['confirms']:
            c = [c for c in x['confirms'] if c['rate'] == x['best']] or x['confirms'][-1:]
            runs = c[0]['runs']
            L.append('| at %d msgs/s | median | min | max |\n| --- | --- | --- | --- |'
                     % c[0]['rate'])
            L.append(row3('delivered msgs/s', [r['delivered_rate'] for r in runs]))
            L.append(row3('max backlog (rows)', [r['max_backlog'] for r in runs]))
            L.append('')
        best = x['best'] or 0
        if best:
            L.append('Highest rate bounded for %d s: **%d msgs/s**.\n' % (sz['confirm_seconds'], best))
        else:
            L.append('Highest rate bounded for %d s: **none of the rates tried** (the lowest '
                     'was %d msgs/s).\n' % (sz['confirm_seconds'], min(x['ladder'])))
        targets.append(('3. sustained', '>= 5,000 msgs/s end to end', '%d msgs/s' % best,
                        best >= 5000))
    if '4' in f:
        x = f['4']
        L.append('## 4. Latency\n')
        L.append('One message a transaction at %d msgs/s; the publisher (psycopg2) takes the '
                 'clock right after COMMIT returns; the receiver (a small asyncio HTTP server, '
                 '`bench.py receiver`, keep-alive, 204) takes it when the whole request has '
                 'arrived; same machine clock. %d s a run.\n' % (x['rate'], sz['latency_seconds']))
        L.append('| system | stat | median ms | min | max |\n| --- | --- | --- | --- | --- |')
        for system in ('grelout', 'graphile'):
            for s in ('p50', 'p95', 'p99', 'max'):
                mm, lo, hi = stats([r[s] for r in x[system]])
                L.append('| %s | %s | %.2f | %.2f | %.2f |' % (
                    'graphile-worker' if system == 'graphile' else system, s, mm, lo, hi))
        L.append('')
        p50 = stats([r['p50'] for r in x['grelout']])[0]
        p99 = stats([r['p99'] for r in x['grelout']])[0]
        targets.append(('4. latency', 'p50 <= 2 ms, p99 <= 10 ms',
                        'p50 %.2f ms, p99 %.2f ms' % (p50, p99), p50 <= 2 and p99 <= 10))
    if '5' in f:
        x = f['5']
        L.append('## 5. Flat at scale\n')
        L.append('The figure 2 drain (default settings, %d messages) with %d dead rows and '
                 '%d messages delayed by a day (same topic) in grelout.outbox, against the '
                 'empty-table runs of figure 2 (same session).\n'
                 % (sz['backlog'], x['rows'], x['rows']))
        L.append('| table | median msgs/s | min | max |\n| --- | --- | --- | --- |')
        L.append(row3('empty', f['2']['default']) if '2' in f else '| empty | - | - | - |')
        L.append(row3('%d dead + %d delayed' % (x['rows'], x['rows']), x['rates']))
        L.append('')
        if '2' in f:
            ratio = stats(x['rates'])[0] / stats(f['2']['default'])[0]
            L.append('Ratio (with / empty): **%.2f**\n' % ratio)
            targets.append(('5. flat at scale', 'within 10% of the empty table',
                            '%.2f x' % ratio, ratio >= 0.9))
    if '7' in f and '2' in f:
        x = f['7']
        single = stats(f['2']['default'])[0]
        fan = stats(x['rates'])[0]
        L.append('## 7. Fan-out\n')
        L.append('%d messages of topic `fan`, each routed to the 3 handlers of that topic '
                 '(3 nginx paths), published with the relays paused and drained as in '
                 'figure 2 (default settings): %d deliveries, timed from the reload to the '
                 'last settled delivery, each checked as arrived at nginx. Beside it, '
                 'figure 2\'s single-handler drain (one delivery a message).\n'
                 % (x['messages'], 3 * x['messages']))
        L.append('| drain | median deliveries/s | min | max |\n| --- | --- | --- | --- |')
        L.append(row3('single handler (figure 2, default)', f['2']['default']))
        L.append(row3('fan-out to 3 handlers', x['rates']))
        L.append('')
        L.append(ratio_line('fan-out', fan / single) + '\n')
        cpu = res.get('drain_cpu', [])
        c_single = [c['relay_us'] for c in cpu if c['label'].startswith('default run')]
        c_fan = [c['relay_us'] for c in cpu if c['label'].startswith('fan-out run')]
        if c_single and c_fan:
            L.append('The relay is CPU-bound in both drains (one relay: its database work, '
                     'through SPI in its own process, and its HTTP side); its CPU time a '
                     'delivery (user + system, /proc/PID/stat), median: %.1f us single '
                     'handler, %.1f us fan-out. Both drains deliver the same number of '
                     'deliveries (%d messages x 3 against %d), with the same settings, on '
                     'the same warm cluster, each after VACUUM ANALYZE of both queue tables '
                     'and a CHECKPOINT; the ratio compares deliveries/s with deliveries/s.\n'
                     % (statistics.median(c_single), statistics.median(c_fan),
                        x['messages'], sz['backlog']))
        targets.append(('7. fan-out', 'deliveries/s >= 0.8 x single handler',
                        '%.2f x' % (fan / single), fan / single >= 0.8))
    sections11, targets11 = render_issue11(res, sz)
    L.extend(sections11)
    if '9' in f:
        x = f['9']
        unordered = stats(x['unordered'])[0]
        ordered = stats(x['ordered'])[0]
        p99 = max(r['p99'] for r in x['latency'])
        L.append('## 9. Per-key ordering\n')
        L.append('%d messages over %d keys (message g has key g mod %d, so keys '
                 'interleave), published with the relays paused and drained as in figure 2 '
                 '(default settings), once to a handler with `ordered = true` (one delivery '
                 'of a key in flight at a time) and once to an unordered handler. Then '
                 'commit-to-arrival latency at %d msgs/s to an ordered handler, keys '
                 'cycling over %d, as in figure 4.\n'
                 % (x['messages'], x['keys'], x['keys'], x['rate'], x['keys']))
        L.append('| drain | median deliveries/s | min | max |\n| --- | --- | --- | --- |')
        L.append(row3('unordered', x['unordered']))
        L.append(row3('ordered', x['ordered']))
        L.append('')
        L.append(ratio_line('ordered', ordered / unordered) + '\n')
        L.append('| run | n | p50 ms | p95 ms | p99 ms | max ms |\n| --- | --- | --- | --- | --- | --- |')
        for i, r in enumerate(x['latency']):
            L.append('| %d | %d | %.2f | %.2f | %.2f | %.2f |'
                     % (i + 1, r['n'], r['p50'], r['p95'], r['p99'], r['max']))
        L.append('')
        targets.append(('9. ordered', 'deliveries/s >= 0.5 x unordered (1,000 keys)',
                        '%.2f x' % (ordered / unordered), ordered / unordered >= 0.5))
        targets.append(('9. ordered latency', 'p99 <= 10 ms at %d msgs/s' % x['rate'],
                        '%.2f ms (worst run)' % p99, p99 <= 10))
    sections14, targets14 = render_issue14(res, sz, quick)
    L.extend(sections14)
    sections34, targets34 = render_issue34(res, sz)
    L.extend(sections34)
    sections32, targets32 = render_issue32(res, sz)
    L.extend(sections32)
    sections33, targets33 = render_issue33(res, sz)
    L.extend(sections33)
    mem = res.get('mem', [])
    first = next((s for s in mem if s['label'] == 'after first drain'), None)
    second = next((s for s in mem if s['label'] == 'after %d' % sz['mem_second']), None)
    if first and second:
        L.append('## 6. Memory\n')
        L.append('The relays\' /proc/PID/status (pids from pg_stat_activity, backend_type '
                 '`grelout relay`, default settings, one relay, same process throughout). '
                 'VmRSS counts the shared buffers the process has touched (RssShmem); RssAnon '
                 'is its private memory.\n')
        L.append('| sample | delivered by the relay | VmRSS kB | RssAnon kB | RssShmem kB |')
        L.append('| --- | --- | --- | --- | --- |')
        for s in mem:
            for pid, v in s['rss'].items():
                L.append('| %s | %d | %d | %d | %d |' % (
                    s['label'], s['delivered'].get(pid, s['delivered'].get(str(pid), 0)),
                    v['VmRSS'], v['RssAnon'], v['RssShmem']))
        L.append('')
        growth_rss, growth_anon = [], []
        for pid, v in second['rss'].items():
            if pid in first['rss']:
                growth_rss.append((v['VmRSS'] - first['rss'][pid]['VmRSS']) / 1024.0)
                growth_anon.append((v['RssAnon'] - first['rss'][pid]['RssAnon']) / 1024.0)
        if growth_rss:
            L.append('| growth from %d to %d deliveries | median MB | min | max |'
                     % (sz['mem_first'], sz['mem_second']))
            L.append('| --- | --- | --- | --- |')
            L.append(row3('VmRSS', growth_rss, 2))
            L.append(row3('RssAnon (private)', growth_anon, 2))
            L.append('')
            L.append('(One sample per relay process: memory is a property of the process, '
                     'so min/max are over the relays, not repeated runs.)\n')
            g = stats(growth_anon)[0]
            targets.append(('6. memory', 'growth < 5 MB from %d to %d deliveries (judged on '
                            'private memory, RssAnon)' % (sz['mem_first'], sz['mem_second']),
                            'RssAnon %+.2f MB (VmRSS %+.2f MB, mostly shared buffers touched)'
                            % (g, stats(growth_rss)[0]), g < 5))
    L.append('## Targets (issue 5)\n')
    L.append('| figure | target | measured | met |\n| --- | --- | --- | --- |')
    for t in targets:
        L.append('| %s | %s | %s | %s |' % (t[0], t[1], t[2], 'yes' if t[3] else 'no'))
    L.append('')
    L.append('## Targets (issue 14)\n')
    L.append('| figure | target | measured | met |\n| --- | --- | --- | --- |')
    L.extend('| %s | %s | %s | %s |' % t for t in targets14)
    L.append('')
    if targets11:
        L.append('## Targets (issue 11)\n')
        L.append('| figure | target | measured | met |\n| --- | --- | --- | --- |')
        L.extend('| %s | %s | %s | %s |' % t for t in targets11)
        L.append('')
    if targets34:
        L.append('## Targets (issue 34)\n')
        L.append('| figure | target | measured | met |\n| --- | --- | --- | --- |')
        L.extend('| %s | %s | %s | %s |' % t for t in targets34)
        L.append('')
    if targets32:
        L.append('## Targets (issue 32)\n')
        L.append('| figure | target | measured | met |\n| --- | --- | --- | --- |')
        L.extend('| %s | %s | %s | %s |' % t for t in targets32)
    if targets33:
        L.append('## Targets (issue 33)\n')
        L.append('| figure | target | measured | met |\n| --- | --- | --- | --- |')
        L.extend('| %s | %s | %s | %s |' % t for t in targets33)
        L.append('')
    for note in res.get('notes', []):
        L.append('Note: %s\n' % note)
    L.append('## What ran concurrently\n')
    L.append('Everything runs on the one machine: PostgreSQL (relays and backends), nginx, '
             'the load generators (pgbench, wrk, the Node worker, the Python publisher and '
             'receiver) share its %s cores, so each figure includes the cost of its own load '
             'generator. graphile-worker and grelout never deliver at the same time (the relays '
             'are paused while graphile-worker runs and the other way round). Other work on the '
             'machine (other engineers\' test suites) was not controlled; the 1-minute load '
             'average at each step:\n' % m['cores'])
    L.append('| step | load average (1, 5, 15 min) |\n| --- | --- |')
    for label, la in res['load']:
        L.append('| %s | %s |' % (label, la))
    L.append('')
    L.extend(render_versions(res, quick))
    # each figure's heading names the version it was measured on
    L = [re.sub(r'^(## [0-9]+[.] .*?)(\n?)$', r'\1 (PostgreSQL %d)\2' % m['pg_major'], line)
         if line.startswith('## ') else line for line in L]
    L.append(figures_block(res, quick))
    return '\n'.join(L) + '\n'


# ---------------------------------------------------------------------------
# latency receiver
# ---------------------------------------------------------------------------
def receiver(port_file, log_file, hang=0.0):
    """HTTP/1.1 keep-alive receiver: logs "webhook-id unix-time" per request
    as it arrives, answers 204.  With hang (seconds), figure 8's hanging
    endpoint: each answer comes that late, and SIGUSR1 drops (closes) every
    connection whose request it holds."""
    out = open(log_file, 'a', buffering=1)
    held = set()

    async def handle(reader, writer):
        try:
            while True:
                head = await reader.readuntil(b'\r\n\r\n')
                length = 0
                wid = '-'
                for line in head.split(b'\r\n')[1:]:
                    name, _, value = line.partition(b':')
                    name = name.strip().lower()
                    if name == b'content-length':
                        length = int(value.strip())
                    elif name == b'webhook-id':
                        wid = value.strip().decode()
                if length:
                    await reader.readexactly(length)
                t = time.time()
                out.write('%s %.6f\n' % (wid, t))
                if hang:
                    task = asyncio.current_task()
                    held.add(task)
                    try:
                        await asyncio.sleep(hang)
                    finally:
                        held.discard(task)
                writer.write(b'HTTP/1.1 204 No Content\r\n\r\n')
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    def release():
        for task in list(held):
            task.cancel()

    async def main():
        server = await asyncio.start_server(handle, '127.0.0.1', 0, backlog=1024)
        port = server.sockets[0].getsockname()[1]
        with open(port_file + '.tmp', 'w') as f:
            f.write(str(port))
        os.rename(port_file + '.tmp', port_file)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        loop.add_signal_handler(signal.SIGINT, stop.set)
        loop.add_signal_handler(signal.SIGUSR1, release)
        await stop.wait()
        server.close()

    asyncio.run(main())


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == 'receiver':
        receiver(sys.argv[2], sys.argv[3], float(sys.argv[4]) if len(sys.argv) > 4 else 0.0)
        return 0
    # as many open files as the hard limit allows, for this process and the
    # ones it starts (figure 16's wrk -c2000: the postgres user's soft limit
    # is 1024 on Debian)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    ap = argparse.ArgumentParser()
    ap.add_argument('--mode', choices=('full', 'quick'), default='full')
    ap.add_argument('--work', required=True)
    ap.add_argument('--pgbin', required=True)
    ap.add_argument('--pgdata', required=True)
    ap.add_argument('--pgport', type=int, required=True)
    ap.add_argument('--nginx-port', type=int, required=True)
    # figure 14: nginx's HTTPS server and the run's test CA and certificates
    ap.add_argument('--nginx-tls-port', type=int)
    ap.add_argument('--tls-dir')
    ap.add_argument('--root', required=True)
    ap.add_argument('--revision', default='unknown')
    # figure 10's grelout 1.0 cluster (bench/run), or why there is none
    ap.add_argument('--old-pgbin')
    ap.add_argument('--old-pgdata')
    ap.add_argument('--old-pgport', type=int)
    ap.add_argument('--old-revision', default='1.0')
    ap.add_argument('--old-missing')
    ap.add_argument('--http-engine')
    # the PostgreSQL measured (bench/run --pg N), where grelout was built, the
    # relay's libcurl; another version's report to set the figures beside
    ap.add_argument('--pg-major', type=int)
    ap.add_argument('--built-in')
    ap.add_argument('--relay-curl')
    ap.add_argument('--baseline')
    ap.add_argument('--baseline-name')
    # the report this run replaces, for the 1.1 figures' "none regresses"
    ap.add_argument('--previous')
    args = ap.parse_args()
    b = Bench(args)
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
    try:
        b.run()
    except Broken as e:
        log('BROKEN: %s' % e)
        return 1
    finally:
        b.stop_all()
    return 0


if __name__ == '__main__':
    sys.exit(main())
