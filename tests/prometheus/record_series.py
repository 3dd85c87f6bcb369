#!/usr/bin/env python3
"""Records the /metrics of running diloco processes as promtool input series.

usage: record_series.py SECONDS INTERVAL_S NAME=URL [NAME=URL ...] > series.yml

Every INTERVAL_S seconds for SECONDS, each URL is fetched; each sample becomes a series with
job="diloco" and instance=NAME added to its labels, and `up` is 1 while the URL answers and 0
after. The output is the `input_series:` list of a promtool test (values in promtool's
notation, `_` where a series had no sample), for tests/prometheus/alerts_test.yml.
"""
import re
import sys
import time
import urllib.request

LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$')


def scrape(url):
    try:
        text = urllib.request.urlopen(url, timeout=5).read().decode()
    except OSError:
        return None
    out = {}
    for line in text.splitlines():
        if not line or line.startswith('#'):
            continue
        m = LINE.match(line)
        if m:
            out[(m.group(1), m.group(2) or '')] = m.group(3)
    return out


def main():
    seconds, interval = float(sys.argv[1]), float(sys.argv[2])
    targets = [a.split('=', 1) for a in sys.argv[3:]]
    rounds = int(seconds / interval) + 1
    series = {}  # (instance, name, labels) -> values by round
    start = time.monotonic()
    for r in range(rounds):
        for name, url in targets:
            got = scrape(url)
            series.setdefault((name, 'up', ''), [None] * rounds)[r] = '1' if got else '0'
            for (metric, labels), value in (got or {}).items():
                series.setdefault((name, metric, labels), [None] * rounds)[r] = value
        time.sleep(max(0.0, start + (r + 1) * interval - time.monotonic()))
    print('    input_series:')
    for (instance, metric, labels), values in sorted(series.items()):
        inner = labels[1:-1] if labels else ''
        full = 'job="diloco",instance="%s"' % instance + (',' + inner if inner else '')
        text = ' '.join('_' if v is None else ('NaN' if v.lower() == 'nan' else v) for v in values)
        print("      - series: '%s{%s}'" % (metric, full))
        print("        values: '%s'" % text)


if __name__ == '__main__':
    main()
