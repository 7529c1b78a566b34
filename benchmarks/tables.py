"""The plain-text table the benchmark scripts print (bench_compile.py, bench_train.py, compile_time.py)."""


def table(rows, headers):
    widths = [max(len(str(r[i])) for r in [headers] + rows) for i in range(len(headers))]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    print(line.format(*headers).rstrip())
    print(line.format(*("-" * w for w in widths)))
    for r in rows:
        print(line.format(*map(str, r)).rstrip())
