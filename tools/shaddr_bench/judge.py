# SPDX-License-Identifier: MIT
"""What shaddr-compare's numbers are judged by, beside goals.py: the confirmation pass (the
points the defaults lost, measured again for the Goals) and the cost model fitted to each
contender's ping-pong, with its projection to bigger nodes."""
import json
import os

from . import confirm
from .costs import COLLS, copy_bw, lg, must_move, two_copy_model
from .fit import fit_alpha_beta
from .goals import losses_beyond_noise, losses_vs_best_stock
from .runner import bench_env, run_bench, say


def confirm_losses(cs, res, bench, args, out_dir):
    """The confirmation pass (confirm.py): each point that a judged contender lost beyond the
    noise to the same MPI with shaddr off, and each where the best default lost to the best
    stock contender, measured again with the same benchmark binary and settings, alternating
    the two; the record that the Goals judge by."""
    if args.confirm_reps <= 0:
        return {"skipped": "--confirm-reps 0"}
    by_name = {c.name: c for c in cs}
    targets = [t for t in dict.fromkeys(losses_beyond_noise(res) + losses_vs_best_stock(res))
               if t[0] in by_name and t[1] in by_name]
    if not targets:
        return {"points": []}
    say(f"confirmation: {len(targets)} points lost (beyond the noise to the same MPI with shaddr "
        "off, or to the best stock contender), measured again "
        f"({args.confirm_reps} times each side, alternating, up to {confirm.MAX_REPS} while "
        f"still lost, at most {args.confirm_budget} s)")
    runs = [0]
    os.makedirs(os.path.join(out_dir, "raw"), exist_ok=True)

    def measure(name, coll, sizes):
        c = by_name[name]
        runs[0] += 1
        jpath = os.path.join(out_dir, "raw", f"{name}.confirm{runs[0]}.json")
        opts = ["--coll", coll, "--sizes", sizes, "--validate"]
        if args.iters:
            opts += ["--iters", str(args.iters)]
        rc, _ = run_bench(c, bench, args, jpath, opts, bench_env(c), f"confirmation: {name}")
        try:
            with open(jpath) as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            return None, f"exit {rc}, no results ({e.__class__.__name__})"
        if doc.get("validation") == "failed":
            return None, f"{doc.get('errors')} wrong words"
        return {r["bytes"]: r["t_max_us"] for r in doc["results"] if r["coll"] == coll}, None
    out = confirm.run(targets, measure, args.confirm_reps, args.confirm_budget)
    if out.get("gave_up"):
        say(f"confirmation: {out['gave_up']}")
    return out


# --- cost model ---------------------------------------------------------------------------
def cost_model(res, limit, n, node_bw):
    """Per contender: alpha/beta from its ping-pong; predicted vs measured at n ranks; and a
    projection to bigger nodes (a MODEL: see the report for its assumptions)."""
    out = {}
    big = limit["results"][-1]
    b1_mem = big["one_core_Bps"] / 1e6  # bytes/us, one core, out of cache
    for name, rec in res.items():
        main = rec.get("passes", {}).get("main")
        if not main:
            continue
        pp = [(r["bytes"], r["t_max_us"]) for r in main["results"] if r["coll"] == "pingpong"]
        fit = fit_alpha_beta(pp)
        if not fit:
            continue
        single_copy = "interposer" in name or "patched" in name and "off" not in name
        barrier = [r["t_max_us"] for r in main["results"] if r["coll"] == "barrier"]
        sync = barrier[0] if barrier else fit["alpha_us"]
        pred = []
        for r in main["results"]:
            if r["coll"] == "pingpong":
                continue
            s = r["bytes"]
            g = 1.0 / copy_bw(limit, s, "one_core_Bps")
            if single_copy:  # a synchronisation, then the bytes that must move, on all cores
                mm = must_move(r["coll"], n, s)
                t = sync + (mm / copy_bw(limit, s, "all_core_Bps") if mm else 0)
            else:
                t = two_copy_model(r["coll"], n, s, fit["alpha_us"], fit["beta_us_per_byte"], g)
            pred.append({"coll": r["coll"], "bytes": s, "predicted_us": t,
                         "measured_us": r["t_max_us"]})
        proj = {}
        for cores, bw_gbs in node_bw.items():
            bw = bw_gbs * 1e3  # bytes/us
            rows = {}
            for coll in COLLS:
                for s in (8, 65536, 1 << 20, 16 << 20):
                    if coll == "barrier" and s != 8:
                        continue
                    mm = must_move(coll, cores, s)
                    g = 1.0 / b1_mem
                    if single_copy:
                        lat = lg(cores) * sync / max(lg(n), 1)
                        floor = mm / min(cores * b1_mem, bw) if mm else 0
                        t = lat + floor
                    else:
                        t = max(two_copy_model(coll, cores, s, fit["alpha_us"],
                                               fit["beta_us_per_byte"], g),
                                2 * mm / bw if mm else 0)
                    rows[f"{coll}:{s}"] = t
            proj[str(cores)] = rows
        out[name] = {"fit": fit, "single_copy": single_copy, "sync_us": sync,
                     "predicted": pred, "projection": proj}
    return out
