#!/usr/bin/python3
"""soak.py: grelout's fault-injection soak and relay memory check (issue 6).

Run it through test/chaos/run (which installs the extension when needed and
drops to the postgres OS user); directly, as any user but root:

    soak.py [--short] [--duration S] [--seed N] [--memory] [--skip-memory]
            [--keep]

  --short        CI form: a 120 s soak with the fixed seed 6, no memory check
  --duration S   soak for S seconds (default 600), then the memory check
  --seed N       seed of the fault schedule and of the clients' choices
  --memory       only the memory check
  --skip-memory  only the soak
  --keep         keep the work directory (cluster, logs) even on success

The soak starts its own cluster (3 relays, a 5 s lease, fast retries) and
its own receiver (test/receiver.py, logging every request to a JSONL file),
publishes from several client connections a mix of committed, rolled-back,
savepoint, prepared (committed and rolled back), deduplicated and delayed
messages, some to an endpoint that fails for a while, some to one that hangs
past the request timeout throughout and some to one that fails most of the
time (issue 11: breakers), and injects faults at seeded random times.  Then it stops injecting, lets the outbox drain and
checks what the receiver got against what the clients know they committed.
README.md in this directory lists the invariants and what the server log may
hold.  The exit status is 0 when every invariant holds, 1 otherwise.
"""

import argparse
import base64
import collections
import hashlib
import hmac
import http.client
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import psycopg2
import psycopg2.errors

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
RECEIVER = os.path.join(ROOT, 'test', 'receiver.py')
PYTHON = '/usr/bin/python3'

SHORT_SEED = 6
SHORT_DURATION = 120

WORKERS = 3
LEASE_S = 5.0
REQUEST_TIMEOUT_S = 2.0
HANG_S = 4.0                    # longer than every request timeout
RETRY_BASE_MS = 200
RETRY_MAX_MS = 2000
MAX_ATTEMPTS = 25
DRAIN_DEADLINE_S = 150
CLIENTS = 4

# 32 bytes of key
SECRET = 'whsec_' + base64.b64encode(b'grelout chaos signing key 32byte').decode()

# topic -> handler
TOPICS = {
    'orders': {'path': '/orders', 'weight': 50},
    'signed': {'path': '/signed', 'weight': 20, 'secret': SECRET},
    'slow': {'path': '/slow', 'weight': 10, 'timeout': '1s'},
    'flaky': {'path': '/flaky', 'weight': 20, 'max_attempts': 4},
    # per-key ordering (issue 12): never dead-lettered, so no key blocks
    'ordered': {'path': '/ordered', 'weight': 15, 'ordered': True, 'max_attempts': 1000},
    # issue 11: an endpoint that hangs past the request timeout for the
    # whole soak (its breaker holds its messages: none may go dead), and one
    # that answers 500 most of the time (a short window of 204 now and then;
    # 3 attempts, so some of its messages go dead)
    'hang': {'path': '/hang', 'weight': 8},
    'failing': {'path': '/failing', 'weight': 10, 'max_attempts': 3},
}
PATHS = [h['path'] for h in TOPICS.values()]
FAIL_BODY = 'chaos: failing on purpose'

FAULT_KINDS = ['terminate', 'kill9', 'immediate', 'receiver_stop',
               'receiver_500', 'receiver_hang', 'drop_database', 'reload']
# faults after which a message in flight may be delivered again
CRASHY = {'terminate', 'kill9', 'immediate', 'receiver_stop'}

T_START = time.time()


def say(msg):
    """Print a progress line with the seconds since the start."""
    print('[%7.1f] %s' % (time.time() - T_START, msg), flush=True)


class ConnLost(Exception):
    """The client's connection went away (crash, shutdown, restart)."""


def is_conn_lost(conn, e):
    """Does this psycopg2 error mean the connection is gone?"""
    if isinstance(e, psycopg2.InterfaceError):
        return True
    if getattr(e, 'pgcode', None) is None:
        return True             # raised by libpq itself, not by the server
    if conn is not None and conn.closed:
        return True
    code = getattr(e, 'pgcode', None)
    if isinstance(e, psycopg2.OperationalError) and (
            code is None or code.startswith('57P') or code.startswith('08')):
        return True
    return False


# ---------------------------------------------------------------------------
# the cluster

class Cluster:
    """A PostgreSQL cluster of our own in a temporary directory."""

    def __init__(self, base, conf):
        self.base = base
        self.data = os.path.join(base, 'data')
        self.logfile = os.path.join(base, 'server.log')
        self.port = 5432
        self.conf = conf
        self.bindir = subprocess.check_output(['pg_config', '--bindir'],
                                              text=True).strip()

    def run(self, prog, *args, check=True):
        """Run a PostgreSQL program; raise with its output when it fails."""
        p = subprocess.run([os.path.join(self.bindir, prog)] + list(args),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
        if check and p.returncode != 0:
            raise RuntimeError('%s %s failed:\n%s' % (prog, ' '.join(args), p.stdout))
        return p.returncode

    def init(self):
        self.run('initdb', '-D', self.data, '-A', 'trust', '-U', 'postgres',
                 '-E', 'UTF8', '--locale=C', '--no-sync')
        with open(os.path.join(self.data, 'postgresql.conf'), 'a') as f:
            f.write("\n# grelout chaos soak\n")
            f.write("listen_addresses = ''\n")
            f.write("unix_socket_directories = '%s'\n" % self.base)
            f.write("port = %d\n" % self.port)
            f.write("log_line_prefix = '%m [%p] %b '\n")
            f.write("log_timezone = 'UTC'\n")
            for line in self.conf:
                f.write(line + '\n')

    def bootstrap(self, dbs):
        """Create the databases before the relays exist (a relay started
        before its database exits with FATAL), then preload grelout."""
        self.start()
        for db in dbs:
            self.query('CREATE DATABASE %s' % db, db='postgres')
        self.stop('fast')
        with open(os.path.join(self.data, 'postgresql.conf'), 'a') as f:
            f.write("shared_preload_libraries = 'grelout'\n")
        self.start()
        self.query('CREATE EXTENSION grelout')

    def start(self):
        self.run('pg_ctl', '-D', self.data, '-l', self.logfile, '-w', '-t', '180', 'start')

    def stop(self, mode='fast', check=True):
        return self.run('pg_ctl', '-D', self.data, '-m', mode, '-w', '-t', '180',
                        'stop', check=check)

    def connect(self, db='app', timeout=5):
        c = psycopg2.connect(host=self.base, port=self.port, dbname=db,
                             user='postgres', connect_timeout=timeout,
                             application_name='grelout chaos')
        c.autocommit = True
        return c

    def query(self, sql, args=None, db='app'):
        """Run one statement on a fresh connection; rows or None."""
        c = self.connect(db)
        try:
            cur = c.cursor()
            cur.execute(sql, args)
            return cur.fetchall() if cur.description else None
        finally:
            c.close()

    def wait_ready(self, timeout=180):
        """Poll until the server accepts connections to app again."""
        deadline = time.time() + timeout
        while True:
            try:
                self.query('SELECT 1')
                return True
            except psycopg2.Error:
                if time.time() > deadline:
                    return False
                time.sleep(0.2)

    def relay_pids(self):
        rows = self.query("SELECT pid FROM pg_stat_activity"
                          " WHERE backend_type = 'grelout relay' ORDER BY pid")
        return [r[0] for r in rows]


# ---------------------------------------------------------------------------
# the receiver

class Receiver:
    """test/receiver.py in a process of its own that we stop and restart on
    the same port, with the scripted answer of each path tracked over time
    so that every logged request can be told what it was answered."""

    RESPONSES = {
        'ok': {'status': 204},
        'fail': {'status': 500, 'body': FAIL_BODY},
        'hang': {'status': 204, 'delay': HANG_S},
    }

    def __init__(self, base, paths):
        self.base = base
        self.paths = paths
        self.log = os.path.join(base, 'receiver.jsonl')
        self.port_file = os.path.join(base, 'receiver.port')
        self.port = None
        self.proc = None
        self.lock = threading.RLock()
        self.path_mode = {}             # path -> 'fail' while its endpoint fails
        self.global_mode = None         # None, 'fail' or 'hang'
        self.applied = {}
        self.timeline = {p: [] for p in paths}   # (t_before, t_after, class)

    def start(self):
        with self.lock:
            if os.path.exists(self.port_file):
                os.unlink(self.port_file)
            cmd = [PYTHON, RECEIVER, '--port-file', self.port_file, '--log', self.log]
            if self.port:
                cmd += ['--port', str(self.port)]
            t0 = time.time()
            out = open(os.path.join(self.base, 'receiver.out'), 'a')
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
            out.close()
            deadline = time.time() + 30
            while not os.path.exists(self.port_file):
                if self.proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError('receiver did not start (port %s)' % self.port)
                time.sleep(0.02)
            with open(self.port_file) as f:
                self.port = int(f.read().strip())
            t1 = time.time()
            for p in self.paths:
                self.timeline[p].append((t0, t1, 'ok'))
                self.applied[p] = 'ok'
            self._apply()

    def stop(self):
        with self.lock:
            if self.proc is not None:
                self.proc.send_signal(signal.SIGKILL)
                self.proc.wait()
                self.proc = None

    def running(self):
        return self.proc is not None

    def _post(self, what, obj):
        c = http.client.HTTPConnection('127.0.0.1', self.port, timeout=30)
        try:
            c.request('POST', '/_control/' + what, body=json.dumps(obj),
                      headers={'Content-Type': 'application/json'})
            r = c.getresponse()
            r.read()
            if r.status != 200:
                raise RuntimeError('receiver control %s: %d' % (what, r.status))
        finally:
            c.close()

    def _apply(self):
        """Push the wanted answer of each path to the running receiver."""
        if self.proc is None:
            return
        for p in self.paths:
            want = self.global_mode or self.path_mode.get(p, 'ok')
            if self.applied.get(p) == want:
                continue
            t0 = time.time()
            self._post('script', {'path': p, 'responses': [],
                                  'default': self.RESPONSES[want]})
            self.timeline[p].append((t0, time.time(), want))
            self.applied[p] = want

    def set_global(self, mode):
        with self.lock:
            self.global_mode = mode
            self._apply()

    def set_path(self, path, mode):
        with self.lock:
            if mode == 'ok':
                self.path_mode.pop(path, None)
            else:
                self.path_mode[path] = mode
            self._apply()

    def classify(self, path, t):
        """What a request logged at t on path was answered: ok, fail, hang,
        or unknown when it came while the answer was being switched."""
        cls = None
        for (t0, t1, c) in self.timeline.get(path, []):
            if t >= t1 + 0.02:
                cls = c
            elif t > t0 - 0.1:
                if cls is None or c != cls:
                    return 'unknown'
            else:
                break
        return cls or 'unknown'


# ---------------------------------------------------------------------------
# the clients

class Msg:
    """One published message as its client knows it."""
    __slots__ = ('id', 'topic', 'payload', 'headers', 'not_before',
                 'commit_sent', 'kind', 'client', 'key', 'began', 'commit_done')

    def __init__(self, mid, topic, payload, headers, not_before, client, key=None,
                 began=None):
        self.id = mid
        self.topic = topic
        self.payload = payload
        self.headers = headers
        self.not_before = not_before
        self.commit_sent = None
        self.kind = None
        self.client = client
        self.key = key
        self.began = began          # the transaction's now()
        self.commit_done = None     # when its COMMIT returned, if known


class Txn:
    """The messages of one client transaction."""

    def __init__(self):
        self.xid = None
        self.now = None
        self.lost_at = None     # when the client saw its COMMIT's connection go
        self.kept = []          # commit with the transaction
        self.dropped = []       # rolled back with a savepoint

    def ids(self):
        return {m.id for m in self.kept} | {m.id for m in self.dropped}


class Client(threading.Thread):
    """One application connection publishing a seeded mix of transactions,
    recording what it knows it committed and rolled back."""

    ACTIONS = [
        ('commit', 30), ('rollback', 8), ('error', 5), ('savepoint', 15),
        ('savepoint_error', 5), ('prepare_commit', 8), ('prepare_rollback', 7),
        ('dedup_in_txn', 7), ('dedup_cross', 8), ('dedup_rollback', 5),
    ]

    def __init__(self, soak, idx, seed):
        super().__init__(name='client-%d' % idx, daemon=True)
        self.soak = soak
        self.cluster = soak.cluster
        self.idx = idx
        self.rng = random.Random(seed)
        self.conn = None
        self.cur = None
        self.seq = 0
        self.nkeys = 0
        self.committed = {}          # id -> Msg
        self.rolled_back = {}        # id -> why
        self.uncertain = []          # (Txn, commit sent at, kind)
        self.problems = []           # violations seen by the client itself
        self.published = 0
        self.counts = collections.Counter()
        topics = list(TOPICS)
        self.topic_w = (topics, [TOPICS[t]['weight'] for t in topics])
        self.action_w = ([a for a, _ in self.ACTIONS], [w for _, w in self.ACTIONS])

    # -- connection

    def connect(self, deadline=None):
        """Connect, retrying while the server restarts.  Without a deadline,
        gives up (False) when the soak stops the clients."""
        while True:
            if deadline is None and self.soak.stop_clients.is_set():
                return False
            try:
                self.conn = self.cluster.connect('app', timeout=5)
                self.cur = self.conn.cursor()
                return True
            except psycopg2.Error:
                if deadline is not None and time.time() > deadline:
                    raise
                time.sleep(0.3)

    def drop(self):
        try:
            if self.conn is not None:
                self.conn.close()
        except psycopg2.Error:
            pass
        self.conn = None
        self.cur = None

    def ex(self, sql, args=None):
        """Execute; ConnLost when the connection went away."""
        if self.conn is None:
            raise ConnLost('not connected')
        try:
            self.cur.execute(sql, args)
            return self.cur.fetchall() if self.cur.description else None
        except psycopg2.Error as e:
            if is_conn_lost(self.conn, e):
                self.drop()
                raise ConnLost(str(e))
            raise

    def problem(self, text):
        self.problems.append('client %d: %s' % (self.idx, text))

    # -- publishing

    def newkey(self):
        self.nkeys += 1
        return 'c%d-k%d' % (self.idx, self.nkeys)

    def publish(self, t, keep, topic=None, delay=None, dedup=None):
        """outbox_publish in the open transaction; remembers the message in
        t.kept (keep) or t.dropped unless the id is one already known."""
        rng = self.rng
        topic = topic or rng.choices(*self.topic_w)[0]
        n = len(t.kept) + len(t.dropped)
        payload = {'c': self.idx, 's': self.seq, 'n': n,
                   'pad': 'x' * rng.randint(0, 48), 'u': 'h\u00e9'}
        key = rng.choice([None, 'k%d' % rng.randint(0, 9)])
        headers = {'x-chaos': '%d-%d-%d' % (self.idx, self.seq, n)} if rng.random() < 0.3 else None
        if delay is None and rng.random() < 0.08:
            delay = round(rng.uniform(1.0, 4.0), 3)
        if delay:
            self.counts['delayed publishes'] += 1
        mid = self.ex("SELECT outbox_publish(%s, %s::jsonb, key => %s,"
                      " headers => %s::jsonb, delay => %s * interval '1 second',"
                      " dedup_key => %s)::text",
                      (topic, json.dumps(payload), key,
                       json.dumps(headers) if headers else None, delay, dedup))[0][0]
        self.published += 1
        if mid in t.ids() or mid in self.committed:
            return mid
        if mid in self.rolled_back:
            self.problem('dedup_key %s returned %s, a rolled-back message' % (dedup, mid))
        m = Msg(mid, topic, payload, headers, t.now + (delay or 0.0), self.idx,
                key=key, began=t.now)
        (t.kept if keep else t.dropped).append(m)
        return mid

    def settle(self, t, committed, t_sent, kind):
        """Record the outcome of a transaction the client is sure of."""
        if committed:
            done = time.time()
            for m in t.kept:
                m.commit_sent = t_sent
                m.commit_done = done
                m.kind = kind
                self.committed.setdefault(m.id, m)
            for m in t.dropped:
                self.rolled_back[m.id] = 'savepoint rollback'
            self.counts['committed txns'] += 1
        else:
            for m in t.kept + t.dropped:
                self.rolled_back[m.id] = kind
            self.counts['rolled-back txns'] += 1

    def run_txn(self, kind, build, end):
        """One transaction: build(t) publishes, then end it with commit,
        rollback, error, prepare_commit or prepare_rollback.  Returns True
        when a commit is confirmed."""
        t = Txn()
        self.seq += 1
        phase = 'open'
        t_sent = None
        gid = None
        commit = False
        try:
            self.ex('BEGIN')
            t.xid, t.now = self.ex("SELECT txid_current(), extract(epoch FROM now())::float8")[0]
            build(t)
            if end == 'commit':
                phase = 'commit'
                t_sent = time.time()
                self.ex('COMMIT')
                self.settle(t, True, t_sent, kind)
                return True
            if end == 'rollback':
                self.ex('ROLLBACK')
                self.settle(t, False, None, kind)
                return False
            if end == 'error':
                try:
                    self.ex('SELECT 1/0')
                    self.problem('1/0 did not fail')
                except psycopg2.errors.DivisionByZero:
                    pass
                self.ex('ROLLBACK')
                self.settle(t, False, None, kind)
                return False
            gid = 'chaos_%d_%d' % (self.idx, self.seq)
            commit = (end == 'prepare_commit')
            phase = 'prepare'
            self.ex("PREPARE TRANSACTION '%s'" % gid)
            return self.finish_prepared(t, gid, commit, kind, prepared=True)
        except ConnLost:
            self.counts['connections lost'] += 1
            if phase == 'open':
                self.settle(t, False, None, 'aborted by a fault')
            elif phase == 'commit':
                t.lost_at = time.time()
                self.uncertain.append((t, t_sent, kind))
                self.counts['uncertain commits'] += 1
            else:
                return self.finish_prepared(t, gid, commit, kind, prepared=None)
            return False
        except psycopg2.Error as e:
            self.problem('%s: unexpected error %s: %s' % (kind, e.pgcode, str(e).strip()))
            try:
                self.ex('ROLLBACK')
            except (ConnLost, psycopg2.Error):
                self.drop()
            self.settle(t, False, None, 'failed')
            return False

    def finish_prepared(self, t, gid, commit, kind, prepared):
        """Hold a prepared transaction a moment, then COMMIT or ROLLBACK
        PREPARED it, across reconnects.  prepared is None when the PREPARE
        itself lost its connection."""
        if prepared:
            time.sleep(self.rng.uniform(0.1, 1.5))
        sent_at = None
        deadline = time.time() + 300
        while True:
            try:
                if self.conn is None:
                    self.connect(deadline)
                    self.counts['prepared finished after a reconnect'] += 1
                if prepared is not True or sent_at is not None:
                    n = self.ex("SELECT count(*) FROM pg_prepared_xacts WHERE gid = %s",
                                (gid,))[0][0]
                    if n == 0:
                        if sent_at is not None:
                            self.settle(t, commit, sent_at, kind)
                            return commit
                        if prepared is None:
                            self.settle(t, False, None, 'aborted by a fault')
                            return False
                        self.problem('prepared transaction %s vanished' % gid)
                        self.uncertain.append((t, None, kind))
                        return False
                    prepared = True
                if sent_at is None:
                    sent_at = time.time()
                self.ex("%s PREPARED '%s'" % ('COMMIT' if commit else 'ROLLBACK', gid))
                self.settle(t, commit, sent_at, kind)
                return commit
            except ConnLost:
                self.counts['connections lost'] += 1
                time.sleep(0.2)

    # -- the mix

    def a_commit(self):
        def build(t):
            for _ in range(self.rng.randint(1, 4)):
                self.publish(t, True)
        self.run_txn('commit', build, 'commit')

    def a_rollback(self):
        def build(t):
            for _ in range(self.rng.randint(1, 3)):
                self.publish(t, True)
        self.run_txn('rollback', build, 'rollback')

    def a_error(self):
        def build(t):
            self.publish(t, True)
        self.run_txn('error rollback', build, 'error')

    def a_savepoint(self):
        rng = self.rng

        def build(t):
            self.publish(t, True)
            self.ex('SAVEPOINT s1')
            key = self.newkey() if rng.random() < 0.5 else None
            inner = []
            for i in range(rng.randint(1, 3)):
                inner.append(self.publish(t, False, dedup=key if i == 0 else None))
            self.ex('ROLLBACK TO SAVEPOINT s1')
            after = self.publish(t, True, dedup=key)
            if key:
                self.counts['checked: dedup after a savepoint rollback'] += 1
            if key and after == inner[0]:
                self.problem('dedup_key %s kept the id of a message rolled back'
                             ' with its savepoint' % key)
            if rng.random() < 0.5:
                self.ex('SAVEPOINT s2')
                self.publish(t, True)
                self.ex('RELEASE SAVEPOINT s2')
        self.run_txn('savepoint', build, 'commit' if rng.random() < 0.85 else 'rollback')

    def a_savepoint_error(self):
        def build(t):
            self.publish(t, True)
            self.ex('SAVEPOINT s1')
            self.publish(t, False)
            try:
                self.ex('SELECT 1/0')
                self.problem('1/0 did not fail')
            except psycopg2.errors.DivisionByZero:
                pass
            self.ex('ROLLBACK TO SAVEPOINT s1')
            self.publish(t, True)
        self.run_txn('savepoint error', build, 'commit')

    def a_prepare_commit(self):
        def build(t):
            for _ in range(self.rng.randint(1, 3)):
                self.publish(t, True)
        self.run_txn('prepared commit', build, 'prepare_commit')

    def a_prepare_rollback(self):
        def build(t):
            for _ in range(self.rng.randint(1, 3)):
                self.publish(t, True)
        self.run_txn('prepared rollback', build, 'prepare_rollback')

    def a_dedup_in_txn(self):
        def build(t):
            key = self.newkey()
            a = self.publish(t, True, dedup=key)
            b = self.publish(t, True, dedup=key)
            self.counts['checked: dedup in one transaction'] += 1
            if a != b:
                self.problem('dedup_key %s gave %s then %s in one transaction' % (key, a, b))
            self.publish(t, True)
        self.run_txn('dedup', build, 'commit')

    def a_dedup_cross(self):
        """A delayed message with a dedup_key, then the same key again in the
        next transaction: while the first is surely stored (before its delay
        ran out) the id must be the same."""
        key = self.newkey()
        delay = round(self.rng.uniform(2.5, 4.0), 3)
        first = {}

        def b1(t):
            first['id'] = self.publish(t, True, delay=delay, dedup=key)
            first['now'] = t.now
        if not self.run_txn('dedup', b1, 'commit'):
            return

        def b2(t):
            again = self.publish(t, True, dedup=key)
            if t.now < first['now'] + delay - 0.5:
                self.counts['checked: dedup of a stored message'] += 1
            if t.now < first['now'] + delay - 0.5 and again != first['id']:
                self.problem('dedup_key %s of a stored message gave a new id %s (was %s)'
                             % (key, again, first['id']))
        self.run_txn('dedup', b2, 'commit')

    def a_dedup_rollback(self):
        key = self.newkey()
        first = {}

        def b1(t):
            first['id'] = self.publish(t, True, dedup=key)
        self.run_txn('dedup rolled back', b1, 'rollback')
        if 'id' not in first:
            return

        def b2(t):
            again = self.publish(t, True, dedup=key)
            self.counts['checked: dedup after a rollback'] += 1
            if again == first['id']:
                self.problem('dedup_key %s returned the rolled-back id %s' % (key, again))
        self.run_txn('dedup', b2, 'commit')

    def run(self):
        try:
            while not self.soak.stop_clients.is_set():
                if self.conn is None and not self.connect():
                    break
                action = self.rng.choices(*self.action_w)[0]
                self.counts['action ' + action] += 1
                try:
                    getattr(self, 'a_' + action)()
                except ConnLost:
                    self.counts['connections lost'] += 1
                time.sleep(self.rng.uniform(0.02, 0.08))
        except Exception as e:      # a bug in the client is a failed run
            self.problem('client crashed: %r' % e)
            import traceback
            traceback.print_exc()
        finally:
            self.drop()


# ---------------------------------------------------------------------------
# server log

LOG_RE = re.compile(r'^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+ \w+ \[(\d+)\] (.*?) ?'
                    r'(LOG|WARNING|ERROR|FATAL|PANIC|DETAIL|HINT|CONTEXT|STATEMENT|'
                    r'NOTICE|INFO|DEBUG\d?):  (.*)$')
FAIL_RE = re.compile(r'grelout message ([0-9a-f-]{36}) of topic "[^"]*"'
                     r' (?:failed on|is dead after) attempt (\d+)')

# issue 11: a breaker's WARNING when it opens, LOG when it closes
BREAKER_RE = re.compile(r'grelout handler "([^"]*)" breaker (opened|closed)')

# Lines that may appear with ERROR or FATAL, by backend type; see README.md.
EXPECTED = [
    ('client backend', 'ERROR', re.compile(r'^division by zero')),
    ('client backend', 'FATAL', re.compile(r'^the database system is (starting up|in recovery mode|shutting down|not yet accepting connections)')),
    ('client backend', 'FATAL', re.compile(r'^terminating connection due to administrator command')),
    ('autovacuum worker', 'ERROR', re.compile(r'^canceling autovacuum task')),
    ('autovacuum worker', 'FATAL', re.compile(r'^terminating autovacuum process due to administrator command')),
    ('', 'FATAL', re.compile(r'^the database system is (starting up|in recovery mode|shutting down|not yet accepting connections)')),
]


def scan_server_log(path, kill9_count):
    """Problems in the server log, and the relay's reasons for retries
    (id, attempt) -> error."""
    problems = []
    reasons = {}
    counts = collections.Counter()
    last_fail = {}
    with open(path, errors='replace') as f:
        for line in f:
            line = line.rstrip('\n')
            if 'TRAP:' in line:
                problems.append('assertion failure: ' + line)
            m = LOG_RE.match(line)
            if not m:
                continue
            pid, btype, sev, text = m.groups()
            if sev == 'PANIC':
                problems.append('PANIC: ' + line)
            if sev == 'WARNING' and btype == 'grelout relay':
                fm = FAIL_RE.match(text)
                last_fail[pid] = (fm.group(1), int(fm.group(2))) if fm else None
            elif sev == 'DETAIL' and last_fail.get(pid):
                reasons[last_fail.pop(pid)] = text
            elif sev != 'DETAIL':
                last_fail.pop(pid, None)
            bm = BREAKER_RE.match(text)
            if bm and btype == 'grelout relay':
                counts['breaker %s %s' % (bm.group(1), bm.group(2))] += 1
            sm = re.search(r'\(PID \d+\) was terminated by signal (\d+)', text)
            if sm:
                counts['terminated by signal ' + sm.group(1)] += 1
                if sm.group(1) != '9':
                    problems.append('process died of a signal: ' + line)
            em = re.search(r'background worker "grelout relay(?: \d+)?" \(PID \d+\) exited with exit code (\d+)', text)
            if em:
                counts['relay exit code ' + em.group(1)] += 1
                if em.group(1) != '1':
                    problems.append('relay exited abnormally: ' + line)
            if sev in ('ERROR', 'FATAL'):
                ok = any((b == btype or (b == '' and btype == '')) and s == sev and r.search(text)
                         for b, s, r in EXPECTED)
                counts['%s %s%s' % (btype or 'postmaster', sev, '' if ok else ' (unexpected)')] += 1
                if not ok:
                    problems.append('unexpected %s from %s: %s' % (sev, btype or 'postmaster', line))
    if counts['terminated by signal 9'] > kill9_count:
        problems.append('%d processes were killed by signal 9, the soak killed %d'
                        % (counts['terminated by signal 9'], kill9_count))
    return problems, reasons, counts


# ---------------------------------------------------------------------------
# the soak

class Soak:
    def __init__(self, args, base):
        self.args = args
        self.base = base
        self.seed = args.seed
        self.duration = args.duration
        self.rng = random.Random(self.seed)
        self.cluster = Cluster(base, [
            "grelout.database = 'app'",
            "grelout.workers = %d" % WORKERS,
            "grelout.lease_duration = '%dms'" % int(LEASE_S * 1000),
            "grelout.request_timeout = '%dms'" % int(REQUEST_TIMEOUT_S * 1000),
            "grelout.retry_base = '%dms'" % RETRY_BASE_MS,
            "grelout.retry_max = '%dms'" % RETRY_MAX_MS,
            "grelout.max_attempts = %d" % MAX_ATTEMPTS,
            "grelout.poll_interval = '1s'",
            "restart_after_crash = on",
            "max_prepared_transactions = 20",
            "max_connections = 60",
            # an uncertain commit is resolved by its xid's status and commit
            # time (see check(): an xid lost in a crash can be handed out again)
            "track_commit_timestamp = on",
            # the faults kill PostgreSQL, never the machine: no need to fsync
            "fsync = off",
            "shared_buffers = '64MB'",
        ])
        self.receiver = Receiver(base, PATHS)
        self.stop_clients = threading.Event()
        self.stop_faults = threading.Event()
        self.faults = []            # dicts: kind, t0, t1, detail
        self.flaky_windows = []
        self.failing_windows = []   # when /failing answered 204
        self.scratch = 0
        self.clients = []

    # -- setup

    def setup(self):
        say('cluster in %s' % self.base)
        self.cluster.init()
        self.scratch = 1
        self.cluster.bootstrap(['app', 'scratch_1'])
        self.receiver.start()
        say('receiver on 127.0.0.1:%d' % self.receiver.port)
        for topic, h in TOPICS.items():
            self.cluster.query(
                "INSERT INTO grelout.handlers (topic, url, headers, secret, timeout, max_attempts,"
                " ordered) VALUES (%s, %s, %s::jsonb, %s, %s::interval, %s, %s)",
                (topic, 'http://127.0.0.1:%d%s' % (self.receiver.port, h['path']),
                 json.dumps({'authorization': 'Bearer chaos'}) if topic == 'signed' else '{}',
                 h.get('secret'), h.get('timeout'), h.get('max_attempts'),
                 h.get('ordered', False)))
        deadline = time.time() + 60
        while len(self.cluster.relay_pids()) != WORKERS:
            if time.time() > deadline:
                raise RuntimeError('the relays did not start')
            time.sleep(0.2)
        # issue 11's bad endpoints, from the start until the end phase
        self.receiver.set_path('/hang', 'hang')
        self.receiver.set_path('/failing', 'fail')

    # -- faults

    def sleep(self, seconds, event=None):
        (event or self.stop_faults).wait(seconds)

    def fault(self, kind, rng):
        """Inject one fault; its parameters come from rng only."""
        pick = rng.randrange(WORKERS)
        length = rng.uniform(2.0, 6.0)
        batch = rng.choice([1, 7, 25, 100, 400])
        conc = rng.choice([1, 3, 10, 50, 120])
        ev = {'kind': kind, 't0': time.time(), 'detail': ''}
        try:
            if kind in ('terminate', 'kill9'):
                pids = []
                deadline = time.time() + 20
                while not pids and time.time() < deadline:
                    pids = self.cluster.relay_pids()
                    if not pids:
                        time.sleep(0.2)
                if not pids:
                    ev['detail'] = 'skipped: no relay running'
                    return ev
                pid = pids[pick % len(pids)]
                ev['t0'] = time.time()
                if kind == 'terminate':
                    self.cluster.query('SELECT pg_terminate_backend(%s)', (pid,))
                    ev['detail'] = 'relay pid %d' % pid
                else:
                    os.kill(pid, signal.SIGKILL)
                    ev['detail'] = 'relay pid %d, crash restart' % pid
                    time.sleep(0.5)
                    if not self.cluster.wait_ready():
                        raise RuntimeError('no recovery after kill -9')
            elif kind == 'immediate':
                self.cluster.stop('immediate')
                time.sleep(length / 2)
                self.cluster.start()
                self.cluster.wait_ready()
                ev['detail'] = 'down %.1f s' % (time.time() - ev['t0'])
            elif kind == 'receiver_stop':
                self.receiver.stop()
                time.sleep(length)
                self.receiver.start()
                ev['detail'] = 'down %.1f s' % length
            elif kind in ('receiver_500', 'receiver_hang'):
                self.receiver.set_global('fail' if kind == 'receiver_500' else 'hang')
                time.sleep(length)
                self.receiver.set_global(None)
                ev['detail'] = '%.1f s' % length
            elif kind == 'drop_database':
                name = 'scratch_%d' % self.scratch
                self.cluster.query('CREATE TABLE t AS SELECT g FROM generate_series(1, 1000) g',
                                   db=name)
                t_drop = time.time()
                for attempt in range(20):
                    try:
                        self.cluster.query('DROP DATABASE %s' % name, db='postgres')
                        break
                    except psycopg2.errors.ObjectInUse:
                        time.sleep(0.5)
                # DROP DATABASE waits for every backend, the relays included,
                # to absorb its ProcSignalBarrier
                ev['detail'] = '%s dropped in %.1f s' % (name, time.time() - t_drop)
                self.scratch += 1
                self.cluster.query('CREATE DATABASE scratch_%d' % self.scratch, db='postgres')
            elif kind == 'reload':
                self.cluster.query('ALTER SYSTEM SET grelout.batch_size = %d' % batch)
                self.cluster.query('ALTER SYSTEM SET grelout.concurrency = %d' % conc)
                self.cluster.query('SELECT pg_reload_conf()')
                ev['detail'] = 'batch_size %d, concurrency %d' % (batch, conc)
        except (psycopg2.Error, RuntimeError, OSError) as e:
            ev['detail'] += ' (failed: %s)' % str(e).strip().splitlines()[0]
            self.cluster.wait_ready()
        finally:
            ev['t1'] = time.time()
        return ev

    def fault_loop(self):
        rng = random.Random(self.seed * 1000 + 1)
        order = list(FAULT_KINDS)
        rng.shuffle(order)
        end = T_SOAK + self.duration
        i = 0
        while not self.stop_faults.is_set():
            gap = rng.uniform(2.0, 7.0)
            kind = order[i] if i < len(order) else rng.choice(FAULT_KINDS)
            i += 1
            frng = random.Random(rng.random())
            if time.time() + gap > end - 3:
                break
            self.sleep(gap)
            if self.stop_faults.is_set():
                break
            ev = self.fault(kind, frng)
            self.faults.append(ev)
            say('fault %-14s %s' % (kind, ev['detail']))

    def flaky_loop(self):
        """The endpoint of topic flaky fails (500) for a while, now and then."""
        rng = random.Random(self.seed * 1000 + 2)
        while True:
            self.sleep(rng.uniform(5.0, 12.0))
            if self.stop_faults.is_set():
                break
            length = rng.uniform(3.0, 8.0)
            t0 = time.time()
            self.receiver.set_path('/flaky', 'fail')
            self.sleep(length)
            self.receiver.set_path('/flaky', 'ok')
            self.flaky_windows.append((t0, time.time()))
            if self.stop_faults.is_set():
                break

    def failing_loop(self):
        """The endpoint of topic failing answers 500 most of the time: 204
        for 2 to 4 s every 6 to 14 s (longer than the breaker's cooldown, so
        a probe may land in it and close the breaker)."""
        rng = random.Random(self.seed * 1000 + 3)
        while True:
            self.sleep(rng.uniform(6.0, 14.0))
            if self.stop_faults.is_set():
                break
            t0 = time.time()
            self.receiver.set_path('/failing', 'ok')
            self.sleep(rng.uniform(2.0, 4.0))
            self.receiver.set_path('/failing', 'fail')
            self.failing_windows.append((t0, time.time()))
            if self.stop_faults.is_set():
                break

    # -- the run

    def run(self):
        global T_SOAK
        self.setup()
        say('soak for %d s with %d clients, seed %d' % (self.duration, CLIENTS, self.seed))
        T_SOAK = time.time()
        self.clients = [Client(self, i, self.seed * 100 + i) for i in range(CLIENTS)]
        for c in self.clients:
            c.start()
        fl = threading.Thread(target=self.flaky_loop, daemon=True)
        fl.start()
        fa = threading.Thread(target=self.failing_loop, daemon=True)
        fa.start()
        self.fault_loop()
        remaining = T_SOAK + self.duration - time.time()
        if remaining > 0:
            time.sleep(remaining)
        self.stop_faults.set()
        fl.join()
        fa.join()
        say('stopping the clients')
        self.stop_clients.set()
        for c in self.clients:
            c.join(timeout=600)
        say('restoring the receiver (every endpoint, /hang and /failing too, answers 204)'
            ' and the settings')
        if not self.receiver.running():
            self.receiver.start()
        self.receiver.set_global(None)
        for p in PATHS:
            self.receiver.set_path(p, 'ok')
        self.t_recovered = time.time()
        self.breakers_at_recovery = self.breakers()
        self.cluster.wait_ready()
        self.cluster.query('ALTER SYSTEM RESET grelout.batch_size')
        self.cluster.query('ALTER SYSTEM RESET grelout.concurrency')
        self.cluster.query('SELECT pg_reload_conf()')

        t_drain = time.time()
        drained = False
        while time.time() < t_drain + DRAIN_DEADLINE_S:
            try:
                n = self.cluster.query("SELECT count(*) FROM grelout.outbox"
                                       " WHERE state IN ('pending', 'processing')")[0][0]
                if n == 0:
                    drained = True
                    break
            except psycopg2.Error:
                pass
            time.sleep(0.5)
        self.drain_s = time.time() - t_drain
        say('drain %s after %.1f s' % ('done' if drained else 'NOT done', self.drain_s))
        if not drained:
            # what is left, by handler, with its breaker (the end phase
            # recovered every endpoint: a breaker's probe must close it)
            try:
                self.left_pending = self.cluster.query(
                    "SELECT handler, breaker, consecutive_failures, pending, in_flight,"
                    " last_error FROM grelout.handler_status WHERE pending > 0 OR in_flight > 0"
                    " ORDER BY handler")
            except psycopg2.Error as e:
                self.left_pending = [('?', str(e).strip().splitlines()[0])]
        # a relay restarted by the last fault is back within 10 s
        deadline = time.time() + 20
        while time.time() < deadline and len(self.cluster.relay_pids()) != WORKERS:
            time.sleep(0.5)
        time.sleep(1.0)
        return self.check(drained)

    def breakers(self):
        """handler -> (breaker, consecutive failures, pending, dead) from
        grelout.handler_status; {} when it cannot be read."""
        try:
            rows = self.cluster.query("SELECT handler, breaker, consecutive_failures,"
                                      " pending, dead FROM grelout.handler_status")
        except psycopg2.Error:
            return {}
        return {r[0]: tuple(r[1:]) for r in rows}

    # -- the checks

    def check(self, drained):
        v = []                      # violations
        if not drained:
            v.append('the outbox did not drain within %d s of every endpoint answering 204;'
                     ' left (handler, breaker, consecutive failures, pending, in flight,'
                     ' last error): %r' % (DRAIN_DEADLINE_S, getattr(self, 'left_pending', None)))
        committed, rolled, uncertain = {}, {}, {}
        published = 0
        ccounts = collections.Counter()
        for c in self.clients:
            v.extend(c.problems)
            published += c.published
            ccounts.update(c.counts)
            for mid, why in c.rolled_back.items():
                rolled[mid] = why
            committed.update(c.committed)

        # an unknown commit outcome: ask the server what became of the xid
        resolved = collections.Counter()
        for c in self.clients:
            for (t, t_sent, kind) in c.uncertain:
                status = None
                try:
                    status = self.cluster.query('SELECT txid_status(%s)', (t.xid,))[0][0]
                except psycopg2.Error:
                    pass
                if status == 'committed' and t.lost_at is not None:
                    # An xid is not WAL-logged when it is assigned: when the
                    # server crashed before any record of this transaction
                    # reached the WAL, recovery hands the same xid to a later
                    # transaction, whose commit txid_status then reports.  Ours
                    # committed, if at all, before the client lost its
                    # connection; a commit after that is the xid's next owner.
                    try:
                        ts = self.cluster.query(
                            'SELECT extract(epoch FROM pg_xact_commit_timestamp('
                            '(%s %% 4294967296)::text::xid))::float8', (t.xid,))[0][0]
                    except psycopg2.Error:
                        ts = None
                    if ts is not None and ts > t.lost_at:
                        status = 'aborted, xid reused after the crash'
                resolved[status or 'unknown'] += 1
                if status == 'committed' and t_sent is not None:
                    for m in t.kept:
                        m.commit_sent, m.kind = t_sent, kind
                        committed.setdefault(m.id, m)
                    for m in t.dropped:
                        rolled[m.id] = 'savepoint rollback'
                elif status and status.startswith('aborted'):
                    for m in t.kept + t.dropped:
                        rolled[m.id] = 'commit lost, ' + status
                else:
                    for m in t.kept + t.dropped:
                        uncertain[m.id] = m
        both = set(committed) & set(rolled)
        for mid in sorted(both):
            v.append('message %s is both committed and rolled back (%s)' % (mid, rolled[mid]))

        # the outbox after the drain
        rows = self.cluster.query("SELECT id::text, topic, state, attempts, last_error"
                                  " FROM grelout.outbox")
        outbox = {r[0]: r for r in rows}
        states = collections.Counter(r[2] for r in rows)
        if states['processing']:
            v.append('%d rows left processing after the drain' % states['processing'])
        if states['pending']:
            v.append('%d rows left pending after the drain deadline' % states['pending'])
        prepared = self.cluster.query('SELECT gid FROM pg_prepared_xacts')
        if prepared:
            v.append('prepared transactions left: %s' % ', '.join(r[0] for r in prepared))

        # relays
        pids = self.cluster.relay_pids()
        relays = self.cluster.query('SELECT relay, pid, activity, delivered, retried,'
                                    ' dead_lettered FROM grelout.relays ORDER BY relay')
        if len(pids) != WORKERS:
            v.append('%d relays in pg_stat_activity, expected %d' % (len(pids), WORKERS))
        if len(relays) != WORKERS or any(r[1] is None for r in relays):
            v.append('grelout.relays shows a relay not running: %r' % (relays,))

        # the server log
        kill9 = sum(1 for f in self.faults if f['kind'] == 'kill9')
        log_problems, reasons, log_counts = scan_server_log(self.cluster.logfile, kill9)
        v.extend(log_problems)

        # what the receiver got
        handlers = {h['path']: t for t, h in TOPICS.items()}
        reqs = collections.defaultdict(list)
        nreq = 0
        with open(self.receiver.log, errors='replace') as f:
            for line in f:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                nreq += 1
                h = r.get('headers', {})
                mid = h.get('webhook-id')
                try:
                    attempt = int(h.get('grelout-attempt', '0'))
                except ValueError:
                    attempt = 0
                cls = self.receiver.classify(r['path'], r['received_at'])
                if cls == 'unknown' and (reasons.get((mid, attempt)) or '').startswith('HTTP 500'):
                    cls = 'fail'        # the relay saw the 500: the switch had applied
                reqs[mid].append((r['received_at'], r['path'], attempt, cls, h, r.get('body', '')))
        for lst in reqs.values():
            lst.sort(key=lambda x: x[0])

        key = base64.b64decode(SECRET[len('whsec_'):])
        bad_sig = bad_body = early = 0
        for mid, lst in reqs.items():
            m = committed.get(mid)
            if mid in rolled:
                v.append('PHANTOM: rolled-back message %s (%s) was sent %d times'
                         % (mid, rolled[mid], len(lst)))
                continue
            if m is None:
                if mid not in uncertain:
                    v.append('PHANTOM: unknown message %s was sent (path %s)' % (mid, lst[0][1]))
                continue
            for (t, path, attempt, cls, h, body) in lst:
                if handlers.get(path) != m.topic or h.get('grelout-topic') != m.topic:
                    v.append('message %s of topic %s was sent to %s' % (mid, m.topic, path))
                try:
                    if json.loads(body) != m.payload:
                        bad_body += 1
                except ValueError:
                    bad_body += 1
                if m.headers and h.get('x-chaos') != m.headers['x-chaos']:
                    bad_body += 1
                if t < m.commit_sent - 0.01:
                    early += 1
                    v.append('message %s was sent %.3f s before its COMMIT (%s)'
                             % (mid, m.commit_sent - t, m.kind))
                elif t < m.not_before - 0.05:
                    early += 1
                    v.append('message %s was sent %.3f s before its delay ran out'
                             % (mid, m.not_before - t))
                if m.topic == 'signed':
                    signed = '%s.%s.%s' % (mid, h.get('webhook-timestamp'), body)
                    want = 'v1,' + base64.b64encode(hmac.new(key, signed.encode(), hashlib.sha256).digest()).decode()
                    if want not in (h.get('webhook-signature') or '').split(' '):
                        bad_sig += 1
        if bad_body:
            v.append('%d requests had a body or header that differs from the published message' % bad_body)
        if bad_sig:
            v.append('%d signed requests had a wrong signature' % bad_sig)

        # every committed message: received at least once, or dead for a reason
        fail_kinds = {f['kind'] for f in self.faults}
        if self.flaky_windows or self.failing_windows:
            fail_kinds.add('receiver_500')
        if any(m.topic == 'hang' for m in committed.values()):
            fail_kinds.add('receiver_hang')     # /hang hangs the whole soak
        lost = 0
        dead = collections.Counter()
        for mid, m in committed.items():
            lst = reqs.get(mid, [])
            row = outbox.get(mid)
            ok = [x for x in lst if x[3] in ('ok', 'unknown')]
            if row is not None and row[2] == 'dead':
                err = row[4] or ''
                maxa = TOPICS[m.topic].get('max_attempts', MAX_ATTEMPTS)
                why = None
                if err.startswith('HTTP 500: ' + FAIL_BODY):
                    why = 'receiver_500'
                elif err.startswith('could not connect') or err.startswith('connection broken') \
                        or err.startswith('empty reply'):
                    why = 'receiver_stop'
                elif err.startswith('timed out after'):
                    why = 'receiver_hang' if 'receiver_hang' in fail_kinds else 'slow'
                elif 'ended without an outcome' in err:
                    why = 'crash'
                dead[m.topic] += 1
                if m.topic == 'hang':
                    # its endpoint never answered 2xx before the end phase:
                    # the breaker opened after a few failures and held the
                    # rest (a failed probe gives its attempt back), so no
                    # message of it reaches its 25 attempts
                    v.append('message %s of the hanging endpoint is dead after %d attempts'
                             ' (%r): its breaker did not hold it' % (mid, row[3], err))
                if row[3] < maxa:
                    v.append('dead message %s has %d attempts of %d' % (mid, row[3], maxa))
                if why is None or (why not in fail_kinds and why not in ('slow', 'crash')) or \
                        (why == 'crash' and not (fail_kinds & CRASHY)):
                    v.append('message %s is dead for an unexpected reason: %r' % (mid, err))
                continue
            if row is not None:
                continue                # pending/processing: reported above
            if not lst:
                lost += 1
                v.append('LOST: committed message %s (%s, topic %s) was never sent'
                         % (mid, m.kind, m.topic))
            elif not ok:
                v.append('message %s was deleted but never answered 2xx (%d attempts seen)'
                         % (mid, len(lst)))

        # per-key order of the ordered handler
        v.extend(self.check_order(committed, reqs))

        # rolled-back messages must not be in the outbox either
        for mid in rolled:
            if mid in outbox:
                v.append('rolled-back message %s is in the outbox (%s)' % (mid, outbox[mid][2]))

        # duplicates: a request after one the receiver answered 2xx (or may
        # have), explained by what happened to the first
        dups = collections.Counter()
        unexplained = []
        for mid, lst in reqs.items():
            prev = None
            for x in lst:
                t, path, attempt, cls, h, body = x
                if prev is not None:
                    cause = self.explain(mid, prev, x, reasons)
                    dups[cause or 'UNEXPLAINED'] += 1
                    if cause is None:
                        unexplained.append('%s attempt %d at %.3f then attempt %d at %.3f'
                                           % (mid, prev[2], prev[0] - T_START, attempt, t - T_START))
                if cls in ('ok', 'unknown', 'hang'):
                    prev = x
        for u in unexplained[:20]:
            v.append('unexplained duplicate: ' + u)
        if len(unexplained) > 20:
            v.append('... and %d more unexplained duplicates' % (len(unexplained) - 20))

        # summary
        received = sum(1 for mid, lst in reqs.items() if mid in committed and
                       any(x[3] in ('ok', 'unknown') for x in lst))
        print()
        print('=' * 72)
        print('grelout chaos soak: seed %d, %d s of faults, %d clients, %d relays'
              % (self.seed, self.duration, CLIENTS, WORKERS))
        print('replay with: bash test/chaos/run --duration %d --seed %d --skip-memory'
              % (self.duration, self.seed))
        print('-' * 72)
        print('messages published (ids returned) %8d' % published)
        print('  committed                       %8d' % len(committed))
        rb = collections.Counter(rolled.values())
        print('  rolled back                     %8d   %s' % (len(rolled), dict(rb)))
        print('  uncertain (commit lost)         %8d   txid_status: %s' % (len(uncertain), dict(resolved)))
        print('requests received                 %8d' % nreq)
        print('  committed messages answered 2xx %8d' % received)
        print('  duplicates                      %8d   %s' % (sum(dups.values()), dict(dups)))
        print('  dead-lettered                   %8d   %s' % (sum(dead.values()), dict(dead)))
        print('  lost                            %8d' % lost)
        print('  ordered pairs checked           %8d' % getattr(self, 'order_pairs', 0))
        fk = collections.Counter(f['kind'] for f in self.faults)
        print('faults injected                   %8d   %s' % (len(self.faults), dict(fk)))
        print('  flaky endpoint windows          %8d' % len(self.flaky_windows))
        print('  failing endpoint 204 windows    %8d' % len(self.failing_windows))
        for path in ('/hang', '/failing'):
            topic = handlers[path]
            mine = [m for m in committed.values() if m.topic == topic]
            print('%-34s%8d requests for %d committed messages: %d answered 2xx, %d dead'
                  % ('  %s endpoint' % topic, sum(1 for lst in reqs.values() for x in lst
                                                  if x[1] == path), len(mine),
                     sum(1 for m in mine if any(x[3] in ('ok', 'unknown')
                                                for x in reqs.get(m.id, []))),
                     dead[topic]))
        print('breakers when the endpoints recovered (breaker, consecutive failures, pending,'
              ' dead): %s' % getattr(self, 'breakers_at_recovery', {}))
        print('breakers after the drain: %s' % self.breakers())
        print('time to drain                     %8.1f s' % self.drain_s)
        print('client transactions               %s' % dict(
            (k, n) for k, n in sorted(ccounts.items()) if not k.startswith(('action', 'checked'))))
        print('client-side checks                %s' % dict(
            (k[9:], n) for k, n in sorted(ccounts.items()) if k.startswith('checked')))
        print('committed messages by kind        %s' % dict(
            collections.Counter(m.kind for m in committed.values())))
        print('relays: %s' % ', '.join('#%d pid %s %s delivered %d retried %d dead %d'
                                       % tuple(r) for r in relays))
        print('server log: %s' % dict(log_counts))
        print('-' * 72)
        if v:
            print('FAILED: %d invariant violations' % len(v))
            for x in v[:60]:
                print('  - ' + x)
            if len(v) > 60:
                print('  ... and %d more' % (len(v) - 60))
        else:
            print('PASSED: every committed message was delivered or dead-lettered for a reason,')
            print('no rolled-back message was sent, every duplicate is explained')
        print('=' * 72)
        return not v

    def check_order(self, committed, reqs):
        """Per-key ordering (issue 12), for the messages of ordered topics:
        when A must go before B (same key; the same transaction, published
        first; or A's COMMIT had returned before B's transaction began, so
        A's commit was visible to B's publish), B is not sent before A was
        answered 2xx (the first request of A classified ok or unknown).
        Returns the violations."""
        v = []
        keys = collections.defaultdict(list)
        for m in committed.values():
            if TOPICS[m.topic].get('ordered') and m.key is not None:
                keys[(m.topic, m.key)].append(m)
        first_sent, first_ok = {}, {}
        for m in (m for ms in keys.values() for m in ms):
            lst = reqs.get(m.id, [])
            if lst:
                first_sent[m.id] = lst[0][0]
            ok = [x[0] for x in lst if x[3] in ('ok', 'unknown')]
            if ok:
                first_ok[m.id] = ok[0]
        pairs = 0
        for (topic, key), ms in keys.items():
            for a in ms:
                if a.id not in first_ok:
                    continue
                for b in ms:
                    if b is a or b.id not in first_sent:
                        continue
                    same_txn = (a.client == b.client and a.began == b.began
                                and a.commit_done == b.commit_done)
                    before = (same_txn and a.id < b.id) or \
                        (not same_txn and a.commit_done is not None
                         and b.began is not None and a.commit_done < b.began)
                    if not before:
                        continue
                    pairs += 1
                    if first_sent[b.id] < first_ok[a.id]:
                        v.append('ORDER: %s key %s: message %s was sent %.3f s before %s,'
                                 ' which goes first, was delivered'
                                 % (topic, key, b.id, first_ok[a.id] - first_sent[b.id], a.id))
        self.order_pairs = pairs
        return v[:40]

    def explain(self, mid, prev, x, reasons):
        """Why the receiver saw message mid again after the request prev that
        it answered 2xx (or may have); None when nothing explains it."""
        t1, attempt, cls = prev[0], prev[2], prev[3]
        t2 = x[0]
        why = reasons.get((mid, attempt))
        if why is not None:
            if why.startswith('timed out'):
                return 'receiver hung past the timeout' if cls == 'hang' else \
                    'relay timed out waiting for the answer'
            if why.startswith('connection broken') or why.startswith('empty reply'):
                return 'connection broken before the answer'
            return 'relay saw: ' + why[:40]
        if cls == 'hang':
            return 'receiver hung past the timeout'
        if cls == 'unknown':
            return 'answer switched by the soak at that moment'
        for f in self.faults:
            if f['kind'] in CRASHY and f['t0'] - LEASE_S - 2.0 <= t1 <= f['t1'] + 2.0 and t2 >= f['t0']:
                return 'in flight at ' + f['kind']
        if t2 - t1 >= LEASE_S - 1.0:
            return 'lease lapse'
        return None


# ---------------------------------------------------------------------------
# the memory check

def proc_status(pid):
    """VmRSS, RssAnon, RssFile, RssShmem of a process, in kB."""
    out = {}
    with open('/proc/%d/status' % pid) as f:
        for line in f:
            k, _, rest = line.partition(':')
            if k in ('VmRSS', 'RssAnon', 'RssFile', 'RssShmem'):
                out[k] = int(rest.split()[0])
    return out


# contexts whose size follows what is in flight at the moment of the dump
TRANSIENT_CONTEXTS = {'grelout jobs', 'TopTransactionContext', 'TopPortalContext',
                      'PortalContext', 'ErrorContext', 'MessageContext'}
CONTEXT_LIMIT = 128 * 1024


def memory_context_dumps(logfile):
    """pid -> one dict a pg_log_backend_memory_contexts dump of a relay:
    bytes used by each top-level context with its children (the children of
    CacheMemoryContext apart, by kind)."""
    dumps = collections.defaultdict(list)
    top = {}
    with open(logfile, errors='replace') as f:
        for line in f:
            m = re.search(r'\[(\d+)\] grelout relay LOG:  (.*)$', line)
            if not m:
                continue
            pid, text = int(m.group(1)), m.group(2)
            if text.startswith('logging memory contexts'):
                dumps[pid].append(collections.Counter())
                continue
            c = re.match(r'level: (\d+); ([^:]+): \d+ total in \d+ blocks;'
                         r' \d+ free \(\d+ chunks\); (\d+) used', text)
            if c and dumps[pid]:
                level, name, used = int(c.group(1)), c.group(2), int(c.group(3))
                if level <= 1:
                    top[pid] = name
                key = 'CacheMemoryContext/' + name if level == 2 and \
                    top.get(pid) == 'CacheMemoryContext' else top.get(pid)
                dumps[pid][-1][key] += used
    return dumps


def memory_check(base, total=100000, first=10000, limit_kb=4096):
    """Deliver total small messages to a fast receiver; the private resident
    memory of each relay after total deliveries must be within limit_kb of
    its memory after first.  One message in ten is signed and carries
    headers and a key.  Besides, so that the error paths run too, one in
    twenty goes to an endpoint that refuses it (422: the message's fault,
    which no breaker counts since 1.2), is retried once and dead-lettered
    (and purged), and one in twenty to a closed port: that handler's
    breaker opens (transport failures count) and probes every 50 ms at
    most, each probe failing and handing its delivery back; the deliveries
    its breaker holds are purged each turn, so that they never fill the
    backlog bound (before, they held the check at 57,000 deliveries)."""
    say('memory check: %d deliveries, cluster in %s' % (total, base))
    cluster = Cluster(base, [
        "grelout.database = 'app'",
        "grelout.workers = %d" % WORKERS,
        "fsync = off",
        "shared_buffers = '32MB'",
        "grelout.retry_base = '10ms'",
        # memfail's open breaker probes every 50 ms at most, so that its
        # failure path keeps running (retry_max caps the cooldown)
        "grelout.breaker_cooldown = '10ms'",
        "grelout.retry_max = '50ms'",
    ])
    receiver = Receiver(base, ['/mem'])
    rejected = {'path': '/memrej', 'responses': [],
                'default': {'status': 422, 'body': 'chaos: rejected on purpose'}}
    cluster.init()
    cluster.bootstrap(['app'])
    ok = True
    try:
        receiver.start()
        cluster.query("INSERT INTO grelout.handlers (topic, url) VALUES ('mem', %s)",
                      ('http://127.0.0.1:%d/mem' % receiver.port,))
        cluster.query("INSERT INTO grelout.handlers (topic, url, secret, headers)"
                      " VALUES ('memsig', %s, %s, '{\"authorization\": \"Bearer m\"}')",
                      ('http://127.0.0.1:%d/memsig' % receiver.port, SECRET))
        cluster.query("INSERT INTO grelout.handlers (topic, url, max_attempts)"
                      " VALUES ('memfail', 'http://127.0.0.1:1/memfail', 2)")
        cluster.query("INSERT INTO grelout.handlers (topic, url, max_attempts)"
                      " VALUES ('memrej', %s, 2)",
                      ('http://127.0.0.1:%d/memrej' % receiver.port,))
        receiver._post('script', rejected)
        deadline = time.time() + 60
        while len(cluster.relay_pids()) != WORKERS and time.time() < deadline:
            time.sleep(0.2)
        pids = cluster.relay_pids()
        conn = cluster.connect()
        cur = conn.cursor()
        published = 0
        samples = []
        marks = [first, 25000, 50000, 75000, total]
        t0 = time.time()
        deadline = t0 + 1800
        last_reset = 0
        while time.time() < deadline:
            # what memfail's open breaker held since the last turn (each a
            # probe's chance, never one in flight) is dropped: none is ever
            # delivered, and none may fill the backlog bound
            cur.execute("SELECT outbox_purge(topic => 'memfail', pending => true)")
            cur.execute("SELECT count(*) FROM grelout.outbox")
            backlog = cur.fetchone()[0]
            if published < total and backlog < 3000:
                n = min(1900, total - published)
                cur.execute("SELECT count(CASE WHEN g %% 10 = 0"
                            " THEN outbox_publish('memsig', jsonb_build_object('n', g), key => 'k',"
                            "  headers => jsonb_build_object('x-n', g::text))"
                            " ELSE outbox_publish('mem', jsonb_build_object('n', g)) END)"
                            " FROM generate_series(%s, %s) g", (published + 1, published + n))
                for failing in ('memfail', 'memrej'):
                    cur.execute("SELECT count(outbox_publish(%s, jsonb_build_object('n', g)))"
                                " FROM generate_series(1, %s) g", (failing, n // 19))
                cur.execute("SELECT outbox_purge()")
                published += n
            cur.execute('SELECT coalesce(sum(delivered), 0) FROM grelout.relays')
            delivered = int(cur.fetchone()[0])
            if delivered - last_reset > 20000:
                receiver._post('reset', {})     # the receiver keeps requests in memory
                receiver._post('script', rejected)  # (and forgets scripts)
                last_reset = delivered
            while marks and delivered >= marks[0]:
                mark = marks.pop(0)
                if mark == total:
                    time.sleep(2.0)             # let the last settle and free finish
                now_pids = cluster.relay_pids()
                if now_pids != pids:
                    say('relays restarted during the memory check: %s -> %s' % (pids, now_pids))
                    ok = False
                st = {pid: proc_status(pid) for pid in pids}
                for pid in pids:
                    cur.execute('SELECT pg_log_backend_memory_contexts(%s)', (pid,))
                samples.append((mark, st))
                say('after %6d deliveries: %s' % (mark, '; '.join(
                    'pid %d VmRSS %d kB private %d kB' % (pid, s['VmRSS'], s['RssAnon'] + s['RssFile'])
                    for pid, s in st.items())))
            if not marks:
                break
            time.sleep(0.5)
        conn.close()
        if marks:
            say('memory check: only %d of %d delivered in time' % (delivered, total))
            return False
        rate = total / (time.time() - t0)
        (_, a), (_, b) = samples[0], samples[-1]
        print()
        print('=' * 72)
        print('relay memory, after %d vs %d deliveries (%.0f deliveries/s)' % (first, total, rate))
        for pid in pids:
            pa = a[pid]['RssAnon'] + a[pid]['RssFile']
            pb = b[pid]['RssAnon'] + b[pid]['RssFile']
            grow = pb - pa
            verdict = 'ok' if grow <= limit_kb else 'GROWS'
            if grow > limit_kb:
                ok = False
            print('  pid %d: private %d -> %d kB (%+d kB), VmRSS %d -> %d kB (%+d kB, shared'
                  ' buffers included) %s' % (pid, pa, pb, grow, a[pid]['VmRSS'], b[pid]['VmRSS'],
                                             b[pid]['VmRSS'] - a[pid]['VmRSS'], verdict))
        # the memory contexts each relay logged at each mark
        time.sleep(1.0)
        dumps = memory_context_dumps(cluster.logfile)
        for pid in pids:
            ds = dumps.get(pid, [])
            if len(ds) != len(samples):
                print('  pid %d: %d memory context dumps of %d' % (pid, len(ds), len(samples)))
                ok = False
                continue
            used = [sum(n for k, n in d.items() if k not in TRANSIENT_CONTEXTS) for d in ds]
            grew = sorted(((ds[-1][k] - ds[0][k], k) for k in ds[-1]
                           if k not in TRANSIENT_CONTEXTS), reverse=True)[:3]
            verdict = 'ok' if used[-1] - used[0] <= CONTEXT_LIMIT else 'GROWS'
            if verdict != 'ok':
                ok = False
            print('  pid %d: memory contexts (without in-flight jobs), kB used at each mark: %s;'
                  ' most growth: %s %s' % (pid, [u // 1024 for u in used],
                                           ', '.join('%s %+d B' % (k, g) for g, k in grew), verdict))
        nlines = 0
        ids = set()
        rejected_n = 0
        with open(receiver.log) as f:
            for line in f:
                nlines += 1
                r = json.loads(line)
                if r['path'] in ('/mem', '/memsig'):
                    ids.add(r['headers'].get('webhook-id'))
                elif r['path'] == '/memrej':
                    rejected_n += 1
        left = cluster.query("SELECT count(*) FROM grelout.outbox"
                             " WHERE topic NOT IN ('memfail', 'memrej')")[0][0]
        print('  %d requests for %d distinct messages; %d rows left in the outbox'
              % (nlines, len(ids), left))
        if len(ids) < total or left != 0:
            ok = False
        # the error paths ran: memrej's refusals went dead with its breaker
        # closed (they are not the endpoint's fault), memfail's breaker opened
        retried, dead = cluster.query("SELECT coalesce(sum(retried), 0),"
                                      " coalesce(sum(dead_lettered), 0) FROM grelout.relays")[0]
        health = dict((r[0], r[1:]) for r in cluster.query(
            "SELECT handler, breaker, consecutive_failures FROM grelout.handler_status"
            " WHERE handler IN ('memfail', 'memrej')"))
        print('  failing paths: %d requests refused with 422, %d retries, %d dead letters;'
              ' breaker, consecutive failures: %s' % (rejected_n, retried, dead, health))
        if rejected_n < 1000 or dead < 500 or health.get('memrej', ('?',))[0] != 'closed' \
                or health.get('memfail', ('?',))[0] == 'closed' or health['memfail'][1] < 100:
            say('memory check: the failing paths did not run as planned')
            ok = False
        print('memory check %s (limit: %d kB of growth of private resident memory)'
              % ('PASSED' if ok else 'FAILED', limit_kb))
        print('=' * 72)
        return ok
    finally:
        receiver.stop()
        cluster.stop('fast', check=False)


# ---------------------------------------------------------------------------

T_SOAK = time.time()


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--short', action='store_true')
    p.add_argument('--duration', type=int)
    p.add_argument('--seed', type=int)
    p.add_argument('--memory', action='store_true')
    p.add_argument('--skip-memory', action='store_true')
    p.add_argument('--keep', action='store_true')
    args = p.parse_args()
    if os.geteuid() == 0:
        sys.exit('soak.py: run it as a user other than root (test/chaos/run does this)')
    if args.short:
        args.seed = SHORT_SEED if args.seed is None else args.seed
        args.duration = args.duration or SHORT_DURATION
        args.skip_memory = True
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1, 1000000)
    if args.duration is None:
        args.duration = 600

    base = tempfile.mkdtemp(prefix='grelout-chaos.')
    os.chmod(base, 0o700)
    ok = True
    soak = None
    try:
        if not args.memory:
            say('seed %d (replay with --seed %d)' % (args.seed, args.seed))
            soak = Soak(args, base)
            try:
                ok = soak.run()
            finally:
                soak.stop_faults.set()
                soak.stop_clients.set()
                soak.receiver.stop()
                soak.cluster.stop('fast', check=False)
        if (args.memory or not args.skip_memory) and (ok or args.memory):
            mbase = os.path.join(base, 'memory')
            os.mkdir(mbase)
            ok = memory_check(mbase) and ok
    except Exception:
        import traceback
        traceback.print_exc()
        ok = False
    if ok and not args.keep:
        shutil.rmtree(base, ignore_errors=True)
    else:
        print('work directory kept: %s (server.log, receiver.jsonl)' % base)
    sys.exit(0 if ok else 1)


if __name__ == '__main__':
    main()
