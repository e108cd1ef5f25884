#!/usr/bin/env python3
"""Draws a ferry benchmark's JSON: `ferry bench decode|throughput|serve --plot FILE` runs this,
and so can anyone with a saved `--json` output or bench/compare-servers.sh's results.

    scripts/plot_bench.py RESULTS.json -o OUT.(png|svg|pdf|html)

What is drawn follows the JSON's "bench" key:
  decode           prefill and decode tok/s against the roofline lines (weights alone, and
                   with the KV cache read); with speculation, tokens accepted per step
  throughput       throughput and goodput per run (--compare rows), TTFT / TPOT percentiles,
                   the TTFT distribution of each run
  serve            one rate: the distributions of TTFT, TPOT and end-to-end latency; several
                   rates: throughput, goodput and p99 latencies against the request rate
  compare-servers  the same, one line per server
An .html output holds the figure and a table of the numbers it was drawn from.
"""
import argparse
import base64
import html
import io
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402


def cdf(ax, values, label):
    v = sorted(values)
    if not v:
        return
    n = len(v)
    ax.step(v, [(i + 1) / n for i in range(n)], where="post", label=label)


def rate_value(r):
    """A request rate as a number for an x axis; inf sits one step past the largest."""
    return float("inf") if r == "inf" else float(r)


def rate_axis(ax, rates):
    finite = [x for x in rates if x != float("inf")]
    top = (max(finite) * 1.5) if finite else 1.0
    xs = [top if x == float("inf") else x for x in rates]
    ax.set_xticks(xs)
    ax.set_xticklabels(["all at once" if x == float("inf") else f"{x:g}" for x in rates])
    ax.set_xlabel("request rate (req/s)")
    return xs


def plot_decode(j):
    spec = "spec_trace" in j
    fig, axes = plt.subplots(1, 3 if spec else 1, figsize=(15 if spec else 6, 4.5), squeeze=False)
    ax = axes[0][0]
    names = ["prefill", "decode"]
    vals = [j["prefill_tokens_per_s"], j["decode_tokens_per_s"]]
    colors = ["#4c72b0", "#dd8452"]
    if spec:  # the plain decode the speedup is measured against, beside the speculative one
        names = ["prefill", "decode", f"decode, {j['spec_method']}"]
        vals = [j["prefill_tokens_per_s"], j["baseline_decode_tokens_per_s"], j["decode_tokens_per_s"]]
        colors.append("#55a868")
    bars = ax.bar(names, vals, color=colors)
    for b, v in zip(bars, vals):
        ax.annotate(f"{v:.1f}", (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom")
    ax.axhline(j["roofline_decode_tokens_per_s"], color="k", ls="--",
               label=f"decode roofline, weights ({j['roofline_decode_tokens_per_s']:.0f})")
    ax.axhline(j["roofline_with_kv_tokens_per_s"], color="grey", ls=":",
               label=f"with the KV cache read ({j['roofline_with_kv_tokens_per_s']:.0f})")
    ax.set_ylabel("tokens / s")
    ax.set_title(f"{j['weight_type']}, {j['threads']} threads: decode at "
                 f"{100 * j['roofline_fraction']:.0f} % of the roofline")
    ax.legend(fontsize=8)
    if spec:
        d, a = j["spec_trace"]["drafted"], j["spec_trace"]["accepted"]
        ax = axes[0][1]
        steps = list(range(1, len(a) + 1))
        ax.bar(steps, d, color="#cccccc", label="drafted")
        ax.bar(steps, a, color="#55a868", label="accepted")
        ax.set_xlabel("decode step (last measured run)")
        ax.set_ylabel("draft tokens")
        ax.set_title(f"{j['spec_method']}, k {j['spec_k']} ({j['spec_policy']}): "
                     f"{100 * j['spec_acceptance_rate']:.0f} % accepted")
        ax.legend(fontsize=8)
        ax = axes[0][2]
        k = max(d) if d else 0
        hist = [sum(1 for x, y in zip(d, a) if x > 0 and y == n) for n in range(k + 1)]
        ax.bar(range(k + 1), hist, color="#55a868")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("draft tokens accepted in a step")
        ax.set_ylabel("steps")
        ax.set_title(f"{j['spec_speedup']:.2f}x plain decoding, "
                     f"{j.get('spec_declined_steps', 0)} steps declined")
    table = [("prefill tok/s", j["prefill_tokens_per_s"]), ("decode tok/s", j["decode_tokens_per_s"]),
             ("TTFT ms", j["ttft_ms"]), ("TPOT ms", j["tpot_ms"]),
             ("read bandwidth GB/s", j["read_bandwidth_gbs"]),
             ("roofline tok/s", j["roofline_decode_tokens_per_s"]),
             ("roofline fraction", j["roofline_fraction"])]
    if spec:
        table += [("speculation speedup", j["spec_speedup"]),
                  ("acceptance rate", j["spec_acceptance_rate"])]
    return fig, f"ferry bench decode: {j['model']}", table


def plot_throughput(j):
    rows = j["runs"] if "runs" in j else [j]
    labels = [r["label"] for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    ax = axes[0]
    x = range(len(rows))
    ax.bar([i - 0.2 for i in x], [r["requests_per_s"] for r in rows], 0.4, label="req/s")
    ax.bar([i + 0.2 for i in x], [r.get("goodput", 0) for r in rows], 0.4, label="goodput")
    ax.set_xticks(list(x))
    ax.set_xticklabels(labels, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("requests / s")
    slo = [f"TTFT <= {rows[0]['slo_ttft_ms']:g} ms" if rows[0].get("slo_ttft_ms") else "",
           f"TPOT <= {rows[0]['slo_tpot_ms']:g} ms" if rows[0].get("slo_tpot_ms") else ""]
    slo = ", ".join(s for s in slo if s) or "no latency target"
    ax.set_title(f"throughput and goodput ({slo})", fontsize=10)
    ax.legend(fontsize=8)
    ax = axes[1]
    for key, off, name in (("ttft_ms", -0.2, "TTFT"), ("tpot_ms", 0.2, "TPOT")):
        p50 = [r[key]["p50"] for r in rows]
        p99 = [r[key]["p99"] for r in rows]
        ax.bar([i + off for i in x], p99, 0.4, alpha=0.4, label=f"{name} p99")
        ax.bar([i + off for i in x], p50, 0.4, label=f"{name} p50")
    ax.set_yscale("log")
    ax.set_xticks(list(x))
    ax.set_xticklabels(labels, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("ms")
    ax.set_title("latency percentiles", fontsize=10)
    ax.legend(fontsize=7)
    ax = axes[2]
    for r in rows:
        cdf(ax, r.get("latencies", {}).get("ttft_ms", []), r["label"])
    ax.set_xscale("log")
    ax.set_xlabel("TTFT (ms)")
    ax.set_ylabel("fraction of requests")
    ax.set_title("TTFT distribution", fontsize=10)
    ax.legend(fontsize=7)
    table = []
    for r in rows:
        table += [(f"{r['label']}: req/s", r["requests_per_s"]),
                  (f"{r['label']}: goodput", r.get("goodput", 0)),
                  (f"{r['label']}: output tok/s", r["output_tokens_per_s"]),
                  (f"{r['label']}: TTFT p99 ms", r["ttft_ms"]["p99"]),
                  (f"{r['label']}: TPOT p99 ms", r["tpot_ms"]["p99"])]
    return fig, f"ferry bench throughput: {j.get('model', '')}", table


def serve_table(name, runs):
    out = []
    for r in runs:
        p = f"{name} @ {r['request_rate']}: " if name or len(runs) > 1 else ""
        out += [(p + "output tok/s", r["output_throughput"]), (p + "goodput", r["goodput"]),
                (p + "TTFT p50 ms", r["ttft_ms"]["p50"]), (p + "TTFT p99 ms", r["ttft_ms"]["p99"]),
                (p + "TPOT p50 ms", r["tpot_ms"]["p50"]), (p + "TPOT p99 ms", r["tpot_ms"]["p99"]),
                (p + "failed", r["failed"])]
    return out


def plot_rate_sweep(series):
    """series: [(name, [run, ...])]: throughput, goodput and p99 latencies against the rate."""
    fig, axes = plt.subplots(1, 4, figsize=(20, 4.5))
    for name, runs in series:
        rates = [rate_value(r["request_rate"]) for r in runs]
        order = sorted(range(len(runs)), key=lambda i: rates[i])
        runs = [runs[i] for i in order]
        rates = [rates[i] for i in order]
        for ax, key, sub, title in ((axes[0], "output_throughput", None, "output tok/s"),
                                    (axes[1], "goodput", None, "goodput (req/s)"),
                                    (axes[2], "ttft_ms", "p99", "TTFT p99 (ms)"),
                                    (axes[3], "tpot_ms", "p99", "TPOT p99 (ms)")):
            xs = rate_axis(ax, rates)
            ys = [r[key][sub] if sub else r[key] for r in runs]
            ax.plot(xs, ys, marker="o", label=name or "server")
            ax.set_title(title, fontsize=10)
    for ax in axes:
        # Latencies of servers far apart read best on a log scale; else from zero.
        ys = [y for line in ax.get_lines() for y in line.get_ydata() if y > 0]
        if ys and max(ys) / min(ys) > 20:
            ax.set_yscale("log")
        else:
            ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
    return fig


def plot_serve(j):
    if "runs" in j:
        fig = plot_rate_sweep([(j.get("label", ""), j["runs"])])
        return fig, f"ferry bench serve: {j['request_url']}", serve_table("", j["runs"])
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    ok = [r for r in j.get("requests", []) if r.get("ok")]
    for ax, key, title in ((axes[0], "ttft_ms", "TTFT"), (axes[1], "tpot_ms", "TPOT"),
                           (axes[2], "e2e_ms", "end to end")):
        cdf(ax, [r[key] for r in ok], j.get("label") or "server")
        for p, ls in (("p50", "--"), ("p99", ":")):
            ax.axvline(j[key][p], color="grey", ls=ls, label=f"{p} {j[key][p]:.0f} ms")
        ax.set_xlabel(f"{title} (ms)")
        ax.set_ylabel("fraction of requests")
        ax.legend(fontsize=8)
    axes[0].set_title(f"{j['completed']} completed at {j['request_rate']} req/s: "
                      f"{j['output_throughput']:.0f} output tok/s", fontsize=10)
    return fig, f"ferry bench serve: {j['request_url']}", serve_table("", [j])


def plot_compare(j):
    series = [(name, runs) for name, runs in j["servers"].items()]
    fig = plot_rate_sweep(series)
    table = []
    for name, runs in series:
        table += serve_table(name, runs)
    return fig, f"serving comparison: {j.get('title', '')}", table


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="a bench's JSON")
    ap.add_argument("-o", "--out", required=True, help=".png, .svg, .pdf or .html")
    a = ap.parse_args()
    with open(a.results) as f:
        j = json.load(f)
    kind = j.get("bench")
    draw = {"decode": plot_decode, "throughput": plot_throughput, "serve": plot_serve,
            "compare-servers": plot_compare}.get(kind)
    if draw is None:
        sys.exit(f"plot_bench: {a.results}: unknown \"bench\" kind {kind!r}")
    fig, title, table = draw(j)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    if a.out.endswith(".html"):
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=110)
        img = base64.b64encode(buf.getvalue()).decode()
        rows = "\n".join(f"<tr><td>{html.escape(k)}</td><td>{v:.4g}</td></tr>"
                         if isinstance(v, (int, float)) else
                         f"<tr><td>{html.escape(k)}</td><td>{html.escape(str(v))}</td></tr>"
                         for k, v in table)
        page = f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
td{{border:1px solid #ccc;padding:2px 8px}}td:last-child{{text-align:right}}</style></head><body>
<h1>{html.escape(title)}</h1><img alt="{html.escape(title)}" src="data:image/png;base64,{img}">
<table>{rows}</table>
<details><summary>the JSON</summary><pre>{html.escape(json.dumps(j, indent=1)[:2000000])}</pre></details>
</body></html>"""
        with open(a.out, "w") as f:
            f.write(page)
    else:
        fig.savefig(a.out, dpi=110)


if __name__ == "__main__":
    main()
