#!/usr/bin/python3
"""bench/test_report.py: checks of the benchmark report, without a server.
The "none regresses" row (issue 14's last target): the 1.1 figures' ratios
are read back from a report as their sections print them, a fall of more
than 10% is called a regression, and only a report of the same PostgreSQL
version is compared with.  The version labelling (issue 31): the report
says which PostgreSQL every figure was measured on, carries its headline
figures for another version's run to read back, and sets them beside that
version's.  Run by `bash test/run bench`; prints TAP."""

import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402

checks = []


def ok(cond, name):
    checks.append((bool(cond), name))


def report(captured, fan, noisy, ordered, revision='abc1234', quick=False, pg_major=15,
           label=True):
    """a report's text with the four ratio lines, printed by bench.py's own
    functions (row3 for figure 1's table, ratio_line for the others); with
    label=False, as a report made before bench/run --pg (the version only in
    its Machine table)."""
    lines = ['# grelout benchmark results', '']
    if label:
        lines.append('**Measured on PostgreSQL %d**: every figure in this report' % pg_major)
    lines += ['| PostgreSQL | PostgreSQL %d.3 (Debian) on x86_64 |' % pg_major, '']
    if quick:
        lines.append('**Quick smoke run (`bench/run --quick`): tiny sizes.**')
    lines += ['| grelout measured | %s |' % revision, '',
              '| ratio to plain INSERT | median | min | max |',
              '| --- | --- | --- | --- |',
              bench.row3('grelout', [1.0, 0.98, 1.02], 2),
              bench.row3(bench.CAPTURED_ROW, [captured, captured - 0.03, captured + 0.04], 2), '',
              bench.ratio_line('fan-out', fan), '',
              'Drain ratio (beside it, breaker off / alone), median of the runs\' ratios: **0.99**.',
              bench.ratio_line('noisy neighbour', noisy), '',
              bench.ratio_line('ordered', ordered), '']
    f = tempfile.NamedTemporaryFile('w', suffix='.md', delete=False)
    f.write('\n'.join(lines))
    f.close()
    return f.name


def run_res(previous, captured, fan, noisy, ordered):
    """the figures of a run whose in-run ratios are the ones given"""
    return {'previous': previous, 'figures': {
        '1': {'ratio_capture': [captured] * 3},
        '2': {'default': [20000.0] * 3},
        '7': {'rates': [20000.0 * fan] * 3},
        '8': {'drain': {'alone': [1000.0] * 3, 'beside': [1000.0 * noisy] * 3,
                        'breaker_off': [990.0] * 3}},
        '9': {'unordered': [10000.0] * 3, 'ordered': [10000.0 * ordered] * 3}}}


path = report(1.08, 0.74, 0.94, 0.48)
prev = bench.previous_ratios(path)
ok(prev == {'revision': 'abc1234', 'captured INSERT': 1.08, 'fan-out': 0.74,
            'noisy neighbour': 0.94, 'ordered': 0.48, 'pg_major': 15},
   'the four ratios and the revision are read back from a report (%r)' % prev)
ok(bench.previous_ratios(report(1.0, 1.0, 1.0, 1.0, quick=True)) is None,
   'a quick run\'s report is never compared with')
ok(bench.previous_ratios('/nonexistent/results.md') is None and bench.previous_ratios(None) is None,
   'no report: nothing to compare with')

text, held = bench.regression_11(run_res(prev, 1.10, 0.70, 0.90, 0.44), False)
ok(held is True, 'falls of up to 10%% are not a regression (%s)' % text)
ok('fan-out 0.74 -> 0.70' in text and 'ordered 0.48 -> 0.44' in text,
   'the row says how each ratio moved')

text, held = bench.regression_11(run_res(prev, 1.08, 0.74, 0.94, 0.42), False)
ok(held is False and 'fell by more than 10%: ordered' in text,
   'a fall of more than 10%% is a regression, and named (%s)' % text)

text, held = bench.regression_11(run_res(prev, 0.50, 0.74, 0.94, 0.48), False)
ok(held is False and 'fell by more than 10%: captured INSERT' in text,
   'the captured INSERT ratio is compared too')

text, held = bench.regression_11(run_res(prev, 1.0, 1.0, 1.0, 1.0), True)
ok(held is None and 'quick' in text, 'a quick run is not compared')

text, held = bench.regression_11(run_res(None, 1.0, 1.0, 1.0, 1.0), False)
ok(held is None, 'without a previous report the row says so (%s)' % text)

res = run_res(prev, 1.08, 0.74, 0.94, 0.48)
del res['figures']['9']
text, held = bench.regression_11(res, False)
ok(held is True and 'ordered' not in text, 'a figure this run did not measure is not compared')


# --- versions (issue 31) ---------------------------------------------------
p17 = report(1.08, 0.74, 0.94, 0.48, pg_major=17)
ok(bench.previous_ratios(p17, 17) is not None and bench.previous_ratios(p17, 17)['pg_major'] == 17,
   'a report of the same version is compared with')
ok(bench.previous_ratios(p17, 15) is None and bench.previous_ratios(path, 17) is None,
   'a report of another version is never compared with (17 against 15, 15 against 17)')
old = report(1.08, 0.74, 0.94, 0.48, label=False)
ok(bench.previous_ratios(old, 15) is not None and bench.previous_ratios(old, 17) is None,
   'a report made before bench/run --pg is read as its Machine table\'s version')
for f in (p17, old):
    os.unlink(f)


def run(pg_major, drain, p99, quick=False, baseline=None):
    """the results of a small run (figures 1, 2 and 4) as bench.py keeps them"""
    return {
        'elapsed': 90.0, 'payload_len': 201, 'notes': [], 'previous': None,
        'load': [('start', '1.50 1.00 0.50'), ('end', '2.00 1.20 0.60')],
        'baseline': baseline, 'baseline_name': None if pg_major == 15 else 'bench/results.md',
        'machine': {'revision': 'abc1234', 'cpu': 'cpu', 'cores': '2', 'memory': '4 GiB',
                    'kernel': 'Linux', 'os': 'Debian 12', 'pg_major': pg_major,
                    'postgres': 'PostgreSQL %d.3 (Debian %d.3-1) on x86_64-pc-linux-gnu'
                                % (pg_major, pg_major),
                    'built_in': 'the Debian root of %d' % pg_major, 'relay_curl': 'curl 8',
                    'curl': 'curl 7', 'nginx': 'nginx', 'wrk': 'wrk', 'node': 'v18',
                    'graphile': '0.16', 'settings': {'fsync': 'on'}},
        'figures': {
            '1': {'tps': {'plain': [1000.0], 'grelout': [980.0], 'graphile': [700.0]},
                  'ratio_grelout': [0.98], 'ratio_graphile': [0.7]},
            '2': {'default': [drain], 'wrk_default': [30000.0], 'default_conns': 50},
            '4': {'rate': 50, 'grelout': [{'p50': 1.0, 'p95': 2.0, 'p99': p99, 'max': 9.0}],
                  'graphile': [{'p50': 5.0, 'p95': 6.0, 'p99': 7.0, 'max': 9.0}]}}}


def write(text):
    f = tempfile.NamedTemporaryFile('w', suffix='.md', delete=False)
    f.write(text)
    f.close()
    return f.name


sz = dict(bench.QUICK)
text15 = bench.render(run(15, 10000.0, 4.0), sz, False)
ok('**Measured on PostgreSQL 15**' in text15 and '| PostgreSQL measured | 15 |' in text15,
   'the report says the version it was measured on (its first lines, its Machine table)')
heads = [line for line in text15.splitlines() if re.match(r'## [0-9]+[.] ', line)]
ok(len(heads) >= 3 and all(h.endswith('(PostgreSQL 15)') for h in heads),
   'each figure\'s heading names its version (%s)' % heads)
ok(bench.report_pg_major(text15) == 15, 'the version is read back from the report')
p15 = write(text15)
base = bench.report_figures(p15)
ok(base is not None and base['pg_major'] == 15 and base['figures']['drain_default'] == 10000.0
   and base['figures']['latency_p99'] == 4.0 and base['quick'] is False,
   'the report\'s figures block carries its version and headline figures (%r)' % (base,))
ok('beside PostgreSQL' not in text15, 'a 15 run sets itself beside nothing')

text17 = bench.render(run(17, 8000.0, 4.4, baseline=base), sz, False)
ok('**Measured on PostgreSQL 17**' in text17 and 'make bench PG=17' in text17,
   'a 17 run says so, and how it was made')
ok('## PostgreSQL 17 beside PostgreSQL 15' in text17,
   'a 17 run sets its figures beside 15\'s report')
row = [line for line in text17.splitlines() if line.startswith('| 2. drain, default')]
ok(row == ['| 2. drain, default settings, msgs/s | 10000 | 8000 | 0.80 | no |'],
   'a figure 20%% lower is outside 10%% (%s)' % row)
row = [line for line in text17.splitlines() if line.startswith('| 4. latency p99')]
ok(row == ['| 4. latency p99, ms | 4.00 | 4.40 | 1.10 | yes |'],
   'a figure 10%% apart (as printed) is within 10%% (%s)' % row)
ok('Outside 10%: 2. drain, default settings, msgs/s.' in text17
   and 'PostgreSQL 15 run: start 1.50, end 2.00' in text17,
   'the section names what lies outside and both runs\' load')
ok(bench.report_figures(write(text17))['pg_major'] == 17, 'a 17 report carries its own block')

text = bench.render(run(17, 8000.0, 4.2, baseline=None), sz, False)
ok('carries no figures block' in text and '| 2. drain, default' not in text,
   'no 15 report with figures: said, not compared')
qbase = dict(base, quick=True)
text = bench.render(run(17, 8000.0, 4.2, baseline=qbase), sz, False)
ok('is a quick run and this one a full run: not compared' in text,
   'a quick run and a full one are not set beside each other')
os.unlink(p15)
os.unlink(path)


# --- endpoint authentication (issue 34, figure 14) ----------------------------
def auth_run(v1a, mtls, oauth, tokens=0, connections=0):
    """a run with figure 14's drains: HMAC at 1000, 1100, 900 msgs/s in its
    three runs, each other way at the given ratios to it, run by run."""
    hmac = [1000.0, 1100.0, 900.0]
    res = run(15, 10000.0, 4.0)
    res['figures']['14'] = {
        'messages': 20000, 'url': 'https://127.0.0.1:4443', 'protocol': 'HTTP/2',
        'concurrency': 50, 'order': [['hmac', 'v1a', 'mtls', 'oauth']] * 3,
        'hmac': hmac, 'v1a': [h * r for h, r in zip(hmac, v1a)],
        'mtls': [h * r for h, r in zip(hmac, mtls)],
        'oauth': [h * r for h, r in zip(hmac, oauth)],
        'connections': {k: [0, connections, 0] for k in ('hmac', 'v1a', 'mtls', 'oauth')},
        'tokens': {'hmac': [0] * 3, 'v1a': [0] * 3, 'mtls': [0] * 3, 'oauth': [0, tokens, 0]},
        'failures': {k: [0] * 3 for k in ('hmac', 'v1a', 'mtls', 'oauth')},
        'relay_us': {k: [100.0] for k in ('hmac', 'v1a', 'mtls', 'oauth')}}
    return res


def rows(text, prefix):
    return [line for line in text.splitlines() if line.startswith(prefix)]


full = dict(bench.FULL)
text = bench.render(auth_run([0.95, 0.80, 0.99], [0.85, 0.93, 0.91], [1.0, 1.0, 1.0]), full, False)
ok('## 14. Endpoint authentication (PostgreSQL 15)' in text and '## Targets (issue 34)' in text,
   'figure 14 has its section and an issue 34 targets table')
ok(rows(text, '| ed25519') == ['| ed25519 (`whsk_`, v1a) | 891 | 880 | 950 | 0.95 | 100.0 | 0 | 0 | 0 |'],
   'each way\'s row: median, min, max msgs/s and the median of the runs\' ratios to HMAC (%s)'
   % rows(text, '| ed25519'))
t = rows(text, '| 14. ')
ok(len(t) == 3 and t[0].startswith('| 14. ed25519') and '0.95 x' in t[0] and t[0].endswith('| yes |'),
   'v1a at 0.95 x (median of 0.95, 0.80, 0.99) meets the 0.9 target (%s)' % t[:1])
ok(len(t) == 3 and '0.91 x' in t[1] and t[1].endswith('| yes |') and '1.00 x' in t[2],
   'mTLS and OAuth2 rows: their own medians of ratios (%s)' % t[1:])
ok(not rows(text, '| note | sizes of this run | backlog'), 'a full-size run adds no size note')
ok(rows(text, '| 2 | hmac, v1a, mtls, oauth | 1100 | 880 | 1023 | 1100 | 0.80 | 0.93 | 1.00 |'),
   'each run\'s order, rates and ratios are listed')

text = bench.render(auth_run([0.85, 0.89, 0.95], [1.0] * 3, [1.0] * 3), full, False)
t = rows(text, '| 14. ed25519')
ok(t and '0.89 x' in t[0] and t[0].endswith('| no |'), 'a median ratio of 0.89 misses the target (%s)' % t)

text = bench.render(auth_run([1.0] * 3, [1.0] * 3, [1.0] * 3, tokens=2), full, False)
t = rows(text, '| 14. OAuth2')
ok(t and '2 token requests' in t[0] and t[0].endswith('| no |'),
   'OAuth2 asking for a token more than once in a drain misses the target (%s)' % t)
text = bench.render(auth_run([1.0] * 3, [1.0] * 3, [1.0] * 3, connections=51), full, False)
t = rows(text, '| 14. mutual TLS')
ok(t and '51 connections' in t[0] and t[0].endswith('| no |'),
   'a drain opening more connections than requests in flight misses the target (%s)' % t)

text = bench.render(auth_run([1.0] * 3, [1.0] * 3, [1.0] * 3), dict(bench.QUICK), True)
ok(rows(text, '| note | sizes of this run | backlog'), 'a quick run says its backlog')
res = run(15, 10000.0, 4.0)
res['figures']['14'] = {'missing': 'bench/run started no HTTPS nginx'}
text = bench.render(res, full, False)
ok('Not measured (bench/run started no HTTPS nginx).' in text
   and rows(text, '| 14. endpoint authentication')[0].endswith('| - |'),
   'figure 14 not measured: said, and its target not judged')
ok('## Targets (issue 34)' not in bench.render(run(15, 10000.0, 4.0), full, False),
   'a run without figure 14 has no issue 34 table')

# --- speed toward far endpoints (issue 32, figures 16 to 19) -------------------
def far_run(far, wrk, https, graphile, knee, knee_failures, one, default,
            cpu_one, cpu_default, p99_20, p99_50):
    """a run with figures 16 to 19 (and figure 4's latency at 50 msgs/s)."""
    res = run(15, 10000.0, 4.0)
    res['figures']['16'] = {
        'messages': 20000, 'conns': 2000, 'http': far, 'wrk': wrk, 'failures': [0] * 3,
        'https': https, 'failures_https': [0] * 3,
        'protocol': 'HTTP/2', 'graphile': graphile, 'graphile_jobs': 200,
        'concurrency': '5000', 'pg_net': 'not measured: pg_net is not in Debian\'s packages'}
    res['figures']['17'] = {'messages': 6000, 'limit': 300, 'rates': knee,
                            'failures': knee_failures, 'errors': [None] * 3}
    res['figures']['18'] = {'messages': 100000, 'default': default, 'one': one,
                            'relays': [2, 2, 2], 'max_workers': '2',
                            'relay_us_default': cpu_default, 'relay_us_one': cpu_one}
    lat = lambda p99: {'n': 200, 'p50': 0.7, 'p95': 1.2, 'p99': p99, 'max': p99 + 1}
    res['figures']['19'] = {'rate': 20, 'grelout': [lat(v) for v in p99_20]}
    res['figures']['4'] = {'rate': 50, 'grelout': [lat(v) for v in p99_50],
                           'graphile': [lat(5.0)] * 3}
    return res


text = bench.render(far_run([12000.0, 11000.0, 13000.0], [19000.0] * 3, [8000.0] * 3,
                            [9.5, 9.8, 9.6], [295.0, 290.0, 299.0], [0, 0, 0],
                            [15000.0] * 3, [28000.0, 29000.0, 27000.0], [60.0] * 3,
                            [62.0] * 3, [1.5, 1.9, 1.7], [1.8, 1.6, 2.4]), full, False)
ok(all(h in text for h in ('## 16. An endpoint 100 ms away (PostgreSQL 15)',
                           '## 17. An endpoint with a knee (PostgreSQL 15)',
                           '## 18. All the cores (PostgreSQL 15)',
                           '## 19. Latency at 20 msgs/s (PostgreSQL 15)',
                           '## Targets (issue 32)')),
   'figures 16 to 19 have their sections and an issue 32 targets table')
t = rows(text, '| 16. far |')
ok(len(t) == 2 and '0.63 x' in t[0] and t[0].endswith('| yes |')
   and '1250 x graphile-worker' in t[1] and 'pg_net not measured' in t[1]
   and t[1].endswith('| yes |'),
   'far: the median of the runs\' ratios to wrk, and the ratio to graphile-worker (%s)' % t)
t = rows(text, '| 16. far, HTTPS')
ok(t and '0.42 x' in t[0] and t[0].endswith('| yes |'), 'far over HTTPS against the ceiling (%s)' % t)
t = rows(text, '| 17. knee')
ok(t and '295/s' in t[0] and t[0].endswith('| yes |'), 'knee: 295/s with no retry meets 0.9 x 300 (%s)' % t)
t = rows(text, '| 18. near')
ok(t and '1.87 x' in t[0] and t[0].endswith('| yes |'), 'near: 1.87 x one relay, CPU within 10%% (%s)' % t)
t = rows(text, '| 19. latency')
ok(len(t) == 1 and '1.70 ms' in t[0] and t[0].endswith('| yes |'),
   'latency: the median of the runs\' p99 at 20 msgs/s under 2 ms (%s)' % t)

text = bench.render(far_run([5000.0] * 3, [19000.0] * 3, [7000.0] * 3,
                            [9.5] * 3, [295.0, 290.0, 299.0], [0, 3, 0], [15000.0] * 3,
                            [20000.0] * 3, [60.0] * 3, [70.0] * 3, [2.5] * 3, [1.0] * 3),
                    full, False)
ok(rows(text, '| 16. far |')[0].endswith('| no |'), 'far at 0.26 x wrk misses its target')
ok(rows(text, '| 16. far, HTTPS')[0].endswith('| no |'), 'far over HTTPS at 0.37 x misses its target')
ok(rows(text, '| 17. knee')[0].endswith('| no |'), 'knee: a retry (a timeout) in a run misses the target')
ok(rows(text, '| 18. near')[0].endswith('| no |'), 'near: 1.33 x and more CPU a delivery misses the target')
ok(rows(text, '| 19. latency')[0].endswith('| no |'), 'latency: p99 2.5 ms at 20 msgs/s misses the target')
res = far_run([1.0] * 3, [1.0] * 3, [1.0] * 3, [1.0] * 3, [1.0] * 3, [0] * 3,
              [1.0] * 3, [1.0] * 3, [1.0] * 3, [1.0] * 3, [1.0] * 3, [1.0] * 3)
res['figures']['18'] = {'missing': 'this grelout has no grelout.max_workers'}
text = bench.render(res, full, False)
ok('Not measured (this grelout has no grelout.max_workers).' in text
   and rows(text, '| 18. near')[0].endswith('| - |'), 'figure 18 not measured: said, not judged')
ok('## Targets (issue 32)' not in bench.render(run(15, 10000.0, 4.0), full, False),
   'a run without figures 16 to 19 has no issue 32 table')


# --- attempt log (issue 33, figure 15) -----------------------------------------
def log_run(failed, all_, logged_failed=0, n=50000):
    """a run with figure 15's drains: off at 1000, 1100, 900 msgs/s in its
    three runs, failed and all at the given ratios to it, run by run."""
    off = [1000.0, 1100.0, 900.0]
    res = run(15, 10000.0, 4.0)
    res['figures']['15'] = {
        'messages': n, 'order': [['off', 'failed', 'all'], ['failed', 'all', 'off'],
                                 ['all', 'off', 'failed']],
        'off': off, 'failed': [o * r for o, r in zip(off, failed)],
        'all': [o * r for o, r in zip(off, all_)],
        'logged': {'off': [0] * 3, 'failed': [0, logged_failed, 0], 'all': [n] * 3},
        'failures': {k: [0] * 3 for k in ('off', 'failed', 'all')},
        'relay_us': {k: [50.0] for k in ('off', 'failed', 'all')}}
    return res


text = bench.render(log_run([1.0, 0.97, 1.01], [0.86, 0.80, 0.90]), full, False)
ok('## 15. Attempt log (PostgreSQL 15)' in text and '## Targets (issue 33)' in text,
   'figure 15 has its section and an issue 33 targets table')
ok(rows(text, '| all |') == ['| all | 860 | 810 | 880 | 0.86 | 50.0 | 50000 | 0 |'],
   'each mode\'s row: median, min, max msgs/s, the median of the runs\' ratios to off, rows logged (%s)'
   % rows(text, '| all |'))
ok(rows(text, '| 2 | failed, all, off | 1100 | 1067 | 880 | 0.97 | 0.80 |'),
   'each run\'s order, rates and ratios are listed (%s)' % rows(text, '| 2 |'))
ok('all **0.86**, failed **1.00**' in text, 'the ratios line: all / off and failed / off')
t = rows(text, '| 15. ')
ok(len(t) == 2 and '0.86 x' in t[0] and t[0].endswith('| yes |'),
   'log_attempts = all at 0.86 x (median of 0.86, 0.80, 0.90) meets the 0.85 target (%s)' % t[:1])
ok(len(t) == 2 and '1.00 x' in t[1] and t[1].endswith('| yes |'),
   'the default at 1.00 x, nothing logged, meets its target (%s)' % t[1:])
ok(not rows(text, '| note | sizes of this run | backlog'), 'a full-size run adds no size note')
text = bench.render(log_run([0.93, 0.94, 1.0], [0.84, 0.83, 0.90]), full, False)
t = rows(text, '| 15. ')
ok(len(t) == 2 and '0.84 x' in t[0] and t[0].endswith('| no |') and t[1].endswith('| no |'),
   'all at 0.84 x and the default at 0.94 x miss their targets (%s)' % t)
text = bench.render(log_run([1.0] * 3, [1.0] * 3, logged_failed=3), full, False)
t = rows(text, '| 15. log_attempts = failed')
ok(t and '3 rows logged' in t[0] and t[0].endswith('| no |'),
   'the default logging a healthy endpoint\'s attempts misses its target (%s)' % t)
text = bench.render(log_run([1.0] * 3, [1.0] * 3, n=1000), dict(bench.QUICK), True)
ok(rows(text, '| note | sizes of this run | backlog 1000'), 'a quick run says its backlog')
ok('## Targets (issue 33)' not in bench.render(run(15, 10000.0, 4.0), full, False),
   'a run without figure 15 has no issue 33 table')

print('1..%d' % len(checks))
for i, (passed, name) in enumerate(checks, 1):
    print('%sok %d - %s' % ('' if passed else 'not ', i, name))
sys.exit(0 if all(p for p, _ in checks) else 1)
