#!/usr/bin/env python3
"""Turns the CSVs written by bench/vs-kafka.sh into bench/RESULTS-vs-kafka.md.

The matrix CSV is kbench's; the extra CSV holds the sustained, partitions
and flush sections. Medians over repetitions; broker CPU seconds are scaled
to one million records; every ratio compares figures measured in this run."""

import argparse
import csv
import datetime
import statistics
from collections import defaultdict


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def num(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def fmt(value, digits=2):
    return "-" if value is None else f"{value:,.{digits}f}"


def ratio(a, b):
    return None if a is None or not b else a / b


def matrix_rows(path):
    """{(case, parts): {broker: {mode: [rows]}}} from kbench's CSV."""
    out = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    with open(path) as f:
        for row in csv.DictReader(f):
            broker, _, parts = row["label"].rpartition("-p")
            out[(row["case"], int(parts))][broker][row["mode"]].append(row)
    return out


def per_million(rows, key):
    return median([num(r[key]) / (num(r["records"]) / 1e6) for r in rows
                   if num(r[key]) is not None and num(r["records"])])


def matrix_section(rows):
    lines = ["## Matrix: produce then consume (acks=1, batch.size=65536, linger.ms=5)", "",
             "| case | parts | produce M/s tarn | kafka | mock | tarn/kafka | p99 ms tarn | kafka "
             "| broker CPU s/M produce tarn | kafka | tarn/kafka | consume M/s tarn | kafka "
             "| broker CPU s/M consume tarn | kafka | tarn/kafka |",
             "|" + "---|" * 16]
    verdict = {"produce_rate": [], "cpu_produce": [], "cpu_consume": []}
    for (case, parts), brokers in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        def rate(broker, mode):
            return median([num(r["rate_per_s"]) for r in brokers[broker][mode]])

        def p99(broker):
            return median([num(r["p99_ms"]) for r in brokers[broker]["produce"]])

        tp, kp, mp = rate("tarn", "produce"), rate("kafka", "produce"), rate("mock", "produce")
        tc, kc = rate("tarn", "consume"), rate("kafka", "consume")
        tcpu_p = per_million(brokers["tarn"]["produce"], "broker_cpu_s")
        kcpu_p = per_million(brokers["kafka"]["produce"], "broker_cpu_s")
        tcpu_c = per_million(brokers["tarn"]["consume"], "broker_cpu_s")
        kcpu_c = per_million(brokers["kafka"]["consume"], "broker_cpu_s")
        verdict["produce_rate"].append(ratio(tp, kp))
        verdict["cpu_produce"].append(ratio(tcpu_p, kcpu_p))
        verdict["cpu_consume"].append(ratio(tcpu_c, kcpu_c))
        m = lambda v: None if v is None else v / 1e6  # noqa: E731
        lines.append(
            f"| {case} | {parts} | {fmt(m(tp))} | {fmt(m(kp))} | {fmt(m(mp))} | {fmt(ratio(tp, kp))} "
            f"| {fmt(p99(('tarn')), 1)} | {fmt(p99('kafka'), 1)} "
            f"| {fmt(tcpu_p, 3)} | {fmt(kcpu_p, 3)} | {fmt(ratio(tcpu_p, kcpu_p))} "
            f"| {fmt(m(tc))} | {fmt(m(kc))} | {fmt(tcpu_c, 3)} | {fmt(kcpu_c, 3)} "
            f"| {fmt(ratio(tcpu_c, kcpu_c))} |")
    return lines, verdict


def extra_rows(path):
    out = defaultdict(lambda: defaultdict(list))
    with open(path) as f:
        for row in csv.DictReader(f):
            out[row["section"]][row["broker"]].append(row)
    return out


def sustained_section(rows):
    if not rows:
        return []
    lines = ["## Sustained: 100 B records into one topic, one million per step", "",
             "| step (M records in) | tarn M/s | tarn p99 ms | tarn CPU s/M | kafka M/s "
             "| kafka p99 ms | kafka CPU s/M |", "|---|---|---|---|---|---|---|"]
    steps = sorted({int(r["step"]) for b in rows.values() for r in b})
    by = {b: {int(r["step"]): r for r in rs} for b, rs in rows.items()}
    for s in steps:
        cells = [str(s)]
        for b in ("tarn", "kafka"):
            r = by.get(b, {}).get(s)
            cells += ["-"] * 3 if r is None else [
                fmt(num(r["rate_per_s"]) / 1e6), fmt(num(r["p99_ms"]), 1), fmt(num(r["broker_cpu_s"]), 3)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def partitions_section(rows):
    if not rows:
        return [], {}
    lines = ["## Empty partitions (topics of 100 partitions)", "",
             "| partitions | tarn RSS MB | tarn +MB | tarn open files | tarn create s "
             "| kafka RSS MB | kafka +MB | kafka open files | kafka create s |",
             "|---|---|---|---|---|---|---|---|---|"]
    by = {b: {int(r["partitions"]): r for r in rs} for b, rs in rows.items()}
    growth = {}
    for count in sorted({p for b in by.values() for p in b}):
        cells = [str(count)]
        for b in ("tarn", "kafka"):
            r, base = by.get(b, {}).get(count), by.get(b, {}).get(0)
            if r is None or base is None:
                cells += ["-"] * 4
                continue
            plus = num(r["broker_rss_mb"]) - num(base["broker_rss_mb"])
            growth[(b, count)] = plus
            cells += [r["broker_rss_mb"], fmt(plus, 0), r["open_fds"], fmt(num(r["secs"]), 1)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines, growth


def flush_section(rows):
    if not rows:
        return [], {}
    lines = ["## flush.messages=1 against the default (100 B, one partition)", "",
             "| broker | default M/s | flush.messages=1 M/s | share kept | share kept per rep | p99 ms default | p99 ms flush=1 |",
             "|---|---|---|---|---|---|---|"]
    shares = {}
    for b in ("tarn", "kafka"):
        rs = rows.get(b, [])
        d = [r for r in rs if r["step"].startswith("default")]
        f1 = [r for r in rs if r["step"].startswith("flush1")]
        dr, fr = median([num(r["rate_per_s"]) for r in d]), median([num(r["rate_per_s"]) for r in f1])
        shares[b] = ratio(fr, dr)
        # Warm-up rounds (warmup-*) match neither prefix and stay out.
        by_step = {r["step"]: num(r["rate_per_s"]) for r in rs}
        per_rep = [ratio(by_step.get("flush1" + r["step"][len("default"):]), num(r["rate_per_s"]))
                   for r in d]
        lines.append(f"| {b} | {fmt(None if dr is None else dr / 1e6)} | {fmt(None if fr is None else fr / 1e6)} "
                     f"| {fmt(shares[b])} | {', '.join(fmt(x) for x in per_rep)} "
                     f"| {fmt(median([num(r['p99_ms']) for r in d]), 1)} "
                     f"| {fmt(median([num(r['p99_ms']) for r in f1]), 1)} |")
    return lines, shares


def reads_section(rows):
    if not rows:
        return []
    lines = ["## Reads: one record per batch, and 1,000 partitions (consume only, 100 B records)", "",
             "Each read after one unreported read of the same records; broker CPU seconds per "
             "million records read, medians over the reads.", "",
             "| shape | records | tarn read M/s | kafka read M/s | tarn CPU s/M | kafka CPU s/M "
             "| tarn/kafka CPU | tarn CPU per read | kafka CPU per read |",
             "|---|---|---|---|---|---|---|---|---|"]
    for shape in ("onebatch", "wide"):
        cells, cpu = [shape, "-"], {}
        rates, per_read = {}, {}
        for b in ("tarn", "kafka"):
            rs = [r for r in rows.get(b, []) if r["step"].startswith(shape + "-")]
            if rs:
                cells[1] = rs[0]["records"]
            rates[b] = median([num(r["rate_per_s"]) for r in rs])
            cpu[b] = median([num(r["broker_cpu_s"]) * 1e6 / num(r["records"]) for r in rs])
            per_read[b] = ", ".join(r["broker_cpu_s"] for r in rs)
        cells += [fmt(None if rates[b] is None else rates[b] / 1e6) for b in ("tarn", "kafka")]
        cells += [fmt(cpu["tarn"], 3), fmt(cpu["kafka"], 3), fmt(ratio(cpu["tarn"], cpu["kafka"])),
                  per_read["tarn"] or "-", per_read["kafka"] or "-"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("matrix_csv")
    ap.add_argument("extra_csv")
    ap.add_argument("--machine", default="")
    ap.add_argument("--commit", default="")
    ap.add_argument("--env", default="")
    ap.add_argument("--rss-after-matrix", default="")
    args = ap.parse_args()

    out = ["# Tarn against Apache Kafka, side by side", "",
           f"Run {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC on {args.machine}; "
           f"commit {args.commit}; `bench/vs-kafka.sh` with {args.env}. Apache Kafka 4.4.0 runs as one "
           "KRaft node (broker and controller) started by `scripts/kafka.sh` with a fixed heap; "
           "librdkafka's mock broker is the client's ceiling (it stores nothing). The client is "
           "`../shared/bench/rdperf` for every broker.", ""]
    matrix, verdict = matrix_section(matrix_rows(args.matrix_csv))
    if len(matrix) > 4:
        out += matrix + [""]
    if args.rss_after_matrix:
        rss = dict(part.split("=") for part in args.rss_after_matrix.split())
        out += [f"RSS after the matrix: Tarn {rss.get('tarn', '-')} MB, Kafka {rss.get('kafka', '-')} MB "
                f"(ratio {fmt(ratio(num(rss.get('tarn')), num(rss.get('kafka'))))}).", ""]
    extra = extra_rows(args.extra_csv)
    out += sustained_section(extra.get("sustained", {})) + [""]
    part_lines, growth = partitions_section(extra.get("partitions", {}))
    out += part_lines + [""]
    flush_lines, shares = flush_section(extra.get("flush", {}))
    out += flush_lines + [""]
    out += reads_section(extra.get("reads", {})) + [""]

    out += ["## Against the targets", ""]
    worst = lambda values, pick: pick([v for v in values if v is not None], default=None)  # noqa: E731
    out.append(f"- Tarn broker CPU per million at most 1/3 of Kafka's: worst produce ratio "
               f"{fmt(worst(verdict['cpu_produce'], max))}, worst consume ratio "
               f"{fmt(worst(verdict['cpu_consume'], max))}.")
    out.append(f"- Tarn produce rate at least Kafka's in every case: lowest ratio "
               f"{fmt(worst(verdict['produce_rate'], min))}.")
    if ("tarn", 10000) in growth and ("kafka", 10000) in growth:
        out.append(f"- 10,000 empty partitions: Tarn +{fmt(growth[('tarn', 10000)], 0)} MB, Kafka "
                   f"+{fmt(growth[('kafka', 10000)], 0)} MB (ratio "
                   f"{fmt(ratio(growth[('tarn', 10000)], growth[('kafka', 10000)]))}; target at most 0.10).")
    if shares.get("tarn") is not None and shares.get("kafka"):
        out.append(f"- flush.messages=1 keeps {fmt(shares['tarn'])} of Tarn's default rate and "
                   f"{fmt(shares['kafka'])} of Kafka's (ratio {fmt(ratio(shares['tarn'], shares['kafka']))}; "
                   "target at least 2).")
    print("\n".join(out))


if __name__ == "__main__":
    main()
