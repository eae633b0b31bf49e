"""Joins the JSON lines of ember's and PyTorch's benchmark runs into one table of ratios
(speedup = torch time / ember time) with the geometric mean per op. Usage: compare.py FILE..."""
import json
import math
import sys
from collections import defaultdict


def main():
    rows = defaultdict(dict)
    for path in sys.argv[1:]:
        for line in open(path):
            line = line.strip()
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            rows[(r["op"], r["case"])][r["impl"]] = r
    by_op = defaultdict(list)
    print(f"{'op':8} {'case':24} {'torch us':>9} {'ember us':>9} {'speedup':>8} {'ember GB/s':>10} {'rel err':>9}  extra")
    for (op, case), impls in rows.items():
        t, e = impls.get("torch"), impls.get("ember")
        if not t or not e or "us" not in e or "us" not in t:
            # One side has no time for this case: it does not run it (torch has no FP8 batched_mm
            # path, for one) or it failed (its error is shown).
            errors = " ".join(f"{name}: {r['error']}" for name, r in sorted(impls.items()) if "error" in r)
            own = ""  # an ember-only case that times ember's bf16 form of it beside (weight_fp8)
            if e and "us" in e and e.get("bf16_us", -1) > 0:
                own = f"  ember {e['us']:.2f} us, ember bf16 {e['bf16_us']:.2f} us (fp8 {e['bf16_us'] / e['us']:.2f}x)"
            print(f"{op:8} {case:24} no ratio: times only from {sorted(n for n, r in impls.items() if 'us' in r)} {errors}{own}")
            continue
        s = t["us"] / e["us"]
        by_op[op].append(s)
        extra = ""
        if "tflops" in e:
            extra += f"  TFLOP/s torch {t.get('tflops', 0):.0f} ember {e['tflops']:.0f}"
        if e.get("bf16_us", -1) > 0:
            extra += f"  ember bf16 {e['bf16_us']:.2f} us (fp8 {e['bf16_us'] / e['us']:.2f}x)"
        print(f"{op:8} {case:24} {t['us']:9.2f} {e['us']:9.2f} {s:8.2f} {e['gbps']:10.0f} {e.get('rel_err', -1):9.1e}{extra}")
    for op, speedups in by_op.items():
        geo = math.exp(sum(map(math.log, speedups)) / len(speedups))
        print(f"{op}: {len(speedups)} cases, geomean speedup {geo:.3f}x, min {min(speedups):.3f}x, max {max(speedups):.3f}x")


if __name__ == "__main__":
    main()
