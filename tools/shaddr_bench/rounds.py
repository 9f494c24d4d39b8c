# SPDX-License-Identifier: MIT
"""Rounds of one contender merged into one record (each size's best)."""

# A run met the fast state when the cross-core probes before and after its main pass both
# reached this share of the best probe of the whole comparison (as tools/shaddr-model): the
# state can flip during a pass (make run at 12:45: a contender whose probe before its round
# read 26 GB/s ran the whole round at the slow state's times).
FAST_SHARE = 0.7


def merge_rounds(recs):
    """One record from a contender's rounds: per (pass, coll, bytes) the best of each time
    over the rounds, errors summed; the first failed round's record if any failed."""
    bad = [r for r in recs if r["status"] != "ok"]
    if bad or len(recs) == 1:
        return bad[0] if bad else recs[0]
    out = dict(recs[0])
    out["rounds"] = len(recs)
    out["cross_core_ref_Bps"] = [r.get("cross_core_ref_Bps") for r in recs]
    out["passes"] = {}
    for pname, doc in recs[0]["passes"].items():
        docs = [r["passes"][pname] for r in recs]
        by = [{(x["coll"], x["bytes"]): x for x in d["results"]} for d in docs]
        merged = []
        for x in doc["results"]:
            k = (x["coll"], x["bytes"])
            xs = [b[k] for b in by if k in b]
            y = dict(x)
            for f in ("t_max_us", "t_min_us", "t_avg_us", "first_call_us"):
                if f in x and x[f] is not None:
                    # The best, not the median: this VM's vCPUs flip between a fast and a
                    # slow cross-core state for minutes at a time, and medians of 3 rounds
                    # still compared contenders met in different states (the patched MPICH's
                    # fallback Allgather of 128 KiB: 16 vs 67 us, equal when measured side by
                    # side in one state). Noise only adds time.
                    y[f] = min(z[f] for z in xs)
            if "errors" in x:
                y["errors"] = sum(z.get("errors", 0) for z in xs)
            y["t_max_us_rounds"] = [z["t_max_us"] for z in xs]
            merged.append(y)
        d = dict(doc, results=merged)
        d["seconds"] = round(sum(z.get("seconds", 0) for z in docs), 1)
        out["passes"][pname] = d
    return out

