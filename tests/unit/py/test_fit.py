# SPDX-License-Identifier: MIT
"""The weighted line fits: known lines come back, the clamps hold, the envelope finds an MPI's
algorithm switch."""
import random

import pytest

from shaddr_bench import fit


def line_points(alpha, beta, sizes, noise=0.0, seed=1):
    rnd = random.Random(seed)
    return [(s, (alpha + beta * s) * rnd.uniform(1 - noise, 1 + noise)) for s in sizes]


SIZES = [1 << k for k in range(3, 23)]


def test_exact_line_is_recovered():
    a, b = fit.weighted_line(line_points(2.0, 1e-3, SIZES))
    assert a == pytest.approx(2.0, rel=1e-9)
    assert b == pytest.approx(1e-3, rel=1e-9)


def test_relative_weighting_keeps_small_sizes_right():
    # One large outlier in absolute terms must not move alpha: the fit weighs relative error.
    pts = line_points(1.0, 1e-4, SIZES)
    pts[-1] = (pts[-1][0], pts[-1][1] * 1.05)
    r = fit.fit_alpha_beta(pts)
    assert r["alpha_us"] == pytest.approx(1.0, rel=0.05)
    assert r["max_rel_err"] == pytest.approx(0.05, abs=0.02)


def test_alpha_beta_needs_two_sizes():
    assert fit.fit_alpha_beta([(8, 1.0)]) is None
    assert fit.fit_alpha_beta([(8, 1.0), (8, 1.2)]) is None
    assert fit.fit_alpha_beta([]) is None


def test_alpha_beta_clamps():
    # Times falling with size: beta is clamped to its floor, alpha never negative.
    r = fit.fit_alpha_beta([(8, 10.0), (1024, 5.0), (65536, 1.0)])
    assert r["beta_us_per_byte"] == 1e-15
    assert r["alpha_us"] >= 0
    # A line through the origin's far side: alpha clamped to 0.
    r = fit.fit_alpha_beta(line_points(-5.0, 1e-2, [1024, 4096, 65536]))
    assert r["alpha_us"] == 0.0


def test_fit_line_floor_and_refit_intercept():
    # Flat times: the slope is the floor (1000 GB/s) and alpha is fitted again for it.
    a, b = fit.fit_line([(8, 2.0), (1024, 2.0), (65536, 2.0)])
    assert b == 1e-9
    assert a == pytest.approx(2.0, rel=1e-3)
    # One point: the floor slope and the point's own time.
    a, b = fit.fit_line([(4096, 3.0)])
    assert (a, b) == (pytest.approx(3.0 - 4096e-9), 1e-9)


def test_envelope_finds_an_algorithm_switch():
    rnd = random.Random(7)
    pts = [(s, (1 + s / 1000 if s < 8192 else 5 + s / 10000) * rnd.uniform(0.98, 1.02))
           for s in SIZES]
    lines = sorted(fit.fit_envelope(pts))
    assert len(lines) == 2
    (a1, b1), (a2, b2) = lines
    assert a1 == pytest.approx(1.0, rel=0.1) and 1e-3 / b1 == pytest.approx(1.0, rel=0.1)
    assert a2 == pytest.approx(5.0, rel=0.1) and 1e-3 / b2 == pytest.approx(10.0, rel=0.1)


def test_envelope_keeps_one_line_for_one_algorithm():
    pts = line_points(3.0, 2e-4, SIZES, noise=0.02)
    assert len(fit.fit_envelope(pts)) == 1


def test_envelope_error_is_zero_on_its_lines():
    pts = line_points(1.0, 1e-3, SIZES)
    assert fit.envelope_error([(1.0, 1e-3), (100.0, 1e-3)], pts) == pytest.approx(0, abs=1e-20)
