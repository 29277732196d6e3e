#!/usr/bin/python3
"""bench/test_report.py: checks of the report's "none regresses" row (issue
14's last target), without a server: the 1.1 figures' ratios are read back
from a report as their sections print them, and a fall of more than 10% is
called a regression.  Run by `bash test/run bench`; prints TAP."""

import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402

checks = []


def ok(cond, name):
    checks.append((bool(cond), name))


def report(captured, fan, noisy, ordered, revision='abc1234', quick=False):
    """a report's text with the four ratio lines, printed by bench.py's own
    functions (row3 for figure 1's table, ratio_line for the others)."""
    lines = ['# grelout benchmark results', '']
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
            'noisy neighbour': 0.94, 'ordered': 0.48},
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

os.unlink(path)
print('1..%d' % len(checks))
for i, (passed, name) in enumerate(checks, 1):
    print('%sok %d - %s' % ('' if passed else 'not ', i, name))
sys.exit(0 if all(p for p, _ in checks) else 1)
