# SPDX-License-Identifier: MIT
"""Straight lines t = alpha + bytes * beta through timings, fitted to the relative error.

Timings span five orders of magnitude (8 B to 4 MiB), so the fit minimises the squared error
relative to each time: a least-squares fit weighted by 1/t^2, numpy's polyfit with w = 1/t (it
squares the weights). One fit serves the comparison's ping-pong model (fit_alpha_beta), the
selection model's curves (fit_line, fit_envelope) and the multi-host model."""
import numpy as np


def weighted_line(points):
    """(alpha, beta) of the line through (bytes, t) points, least squares of the relative
    error; None for fewer than two distinct sizes."""
    x = np.array([p[0] for p in points], dtype=float)
    t = np.array([p[1] for p in points], dtype=float)
    if len(x) < 2 or np.all(x == x[0]):
        return None
    beta, alpha = np.polyfit(x, t, 1, w=1.0 / t)
    return float(alpha), float(beta)


def intercept(points, beta):
    """The alpha that fits the points best, relative error, once beta is fixed."""
    x = np.array([p[0] for p in points], dtype=float)
    t = np.array([p[1] for p in points], dtype=float)
    return float(np.average(t - beta * x, weights=1.0 / (t * t)))


def fit_alpha_beta(points):
    """T = alpha + m * beta for a point-to-point model: alpha (us), beta (us per byte), and the
    worst relative error of the fit; None for fewer than two sizes. Never a negative alpha or
    a beta below 1e-15 us per byte."""
    line = weighted_line(points)
    if line is None:
        return None
    alpha, beta = max(line[0], 0.0), max(line[1], 1e-15)
    err = max(abs(alpha + beta * m - t) / t for m, t in points)
    return {"alpha_us": alpha, "beta_us_per_byte": beta, "max_rel_err": err}


def fit_line(points):
    """One line t = a + s * b of the selection model: b at least 1e-9 us per byte (at most
    1000 GB/s), a fitted again for that b and never below 0."""
    line = weighted_line(points)
    slope = max(line[1] if line else 0.0, 1e-9)
    return max(intercept(points, slope), 0.0), slope


def envelope_error(lines, pts):
    """Sum of squared relative errors of the lower envelope of @lines at @pts."""
    return sum(((min(a + s * b for a, b in lines) - t) / t) ** 2 for s, t in pts)


def fit_envelope(pts, max_lines=3):
    """The lower envelope of up to max_lines lines over contiguous size ranges (an MPI switches
    algorithms by size); an extra line must cut the error by 30% at least."""
    pts = sorted(pts)
    n = len(pts)
    best = [fit_line(pts)]
    best_err = envelope_error(best, pts)
    cuts_list = [[i] for i in range(2, n - 1)]
    if max_lines >= 3:
        cuts_list += [[i, j] for i in range(2, n - 1) for j in range(i + 2, n - 1)]
    for k in (2, 3):
        cand, cand_err = None, None
        for cuts in (c for c in cuts_list if len(c) == k - 1):
            bounds = [0] + cuts + [n]
            lines = [fit_line(pts[bounds[i]:bounds[i + 1]]) for i in range(k)]
            e = envelope_error(lines, pts)
            if cand_err is None or e < cand_err:
                cand, cand_err = lines, e
        if cand and cand_err < best_err * 0.7:
            best, best_err = cand, cand_err
    return best
