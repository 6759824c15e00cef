"""Unit-ball encoding: exact round trips for in-domain tables, rows always inside the unit ball."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from splice_assets.layout import decode, direction_scales, draw_directions, layout_for
from splice_assets.private.encoding import encode, to_unit_ball
from splice_assets.private.validation import conform, validate
from splice_assets.schema import parse_schema

SCHEMA = parse_schema(
    {
        "name": "toy",
        "version": 1,
        "n_min": 1,
        "columns": [
            {"name": "age", "kind": "integer", "bounds": [-5, 120]},
            {"name": "big", "kind": "integer", "bounds": [0, 2**40], "nullable": True},
            {"name": "income", "kind": "continuous", "bounds": [-1e3, 1e6], "nullable": True},
            {"name": "colour", "kind": "categorical", "categories": ["red", "green", "blue"], "nullable": True},
            {"name": "single", "kind": "categorical", "categories": ["only"]},
            {"name": "grade", "kind": "ordinal", "categories": [1, 2, 3, 4, 5, 6, 7, 8]},
            {"name": "flag", "kind": "boolean", "nullable": True},
        ],
    }
)


@st.composite
def in_domain_tables(draw):
    n = draw(st.integers(min_value=1, max_value=40))
    maybe = lambda s: st.one_of(st.none(), s)  # noqa: E731
    return pd.DataFrame(
        {
            "age": draw(st.lists(st.integers(-5, 120), min_size=n, max_size=n)),
            "big": draw(st.lists(maybe(st.integers(0, 2**40)), min_size=n, max_size=n)),
            "income": draw(
                st.lists(maybe(st.floats(-1e3, 1e6, allow_nan=False)), min_size=n, max_size=n)
            ),
            "colour": draw(st.lists(maybe(st.sampled_from(["red", "green", "blue"])), min_size=n, max_size=n)),
            "single": ["only"] * n,
            "grade": draw(st.lists(st.integers(1, 8), min_size=n, max_size=n)),
            "flag": draw(st.lists(maybe(st.booleans()), min_size=n, max_size=n)),
        }
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(in_domain_tables())
def test_decode_encode_round_trip(raw):
    table = validate(raw, SCHEMA).table
    x = encode(table, SCHEMA)
    assert x.shape == (len(table), layout_for(SCHEMA).d)
    assert np.all(np.abs(x) <= 1.0)
    back = decode(x, SCHEMA)
    conform(back, SCHEMA)
    for name in ["age", "big", "colour", "single", "grade", "flag"]:  # categories and integers exact
        pd.testing.assert_series_equal(back[name], table[name], check_names=False)
    np.testing.assert_allclose(back["income"].to_numpy(), table["income"].to_numpy(), rtol=1e-9, atol=1e-6)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 30), st.integers(1, 500), st.integers(0, 2**32 - 1))
def test_encoded_rows_project_inside_the_unit_ball(d, n, seed):
    rng = np.random.default_rng(seed)
    x = rng.choice([-1.0, 1.0], size=(n, d)) * rng.uniform(0.5, 1.0, size=(n, d))
    x[0] = 1.0  # a corner of the cube: the worst case
    ball = to_unit_ball(x)
    assert np.all(np.linalg.norm(ball, axis=1) <= 1.0 + 1e-12)
    theta = draw_directions(seed, 32, d)
    assert np.all(np.abs(ball @ theta.T) <= 1.0 + 1e-12)
    l1 = (x @ theta.T) / direction_scales(theta, "l1")
    assert np.all(np.abs(l1) <= 1.0 + 1e-12)


def test_layout_and_grid_positions():
    layout = layout_for(SCHEMA)
    roles = [(c.column, c.role, c.levels) for c in layout.coordinates]
    assert roles == [
        ("age", "value", 0),
        ("big", "value", 0),
        ("big", "missing", 2),
        ("income", "value", 0),
        ("income", "missing", 2),
        ("colour", "value", 4),
        ("single", "value", 1),
        ("grade", "value", 8),
        ("flag", "value", 3),
    ]
    table = validate(pd.DataFrame({c: [None] for c in SCHEMA.column_names}).assign(single="only"), SCHEMA).table
    x = encode(table, SCHEMA)[0]
    # missing numeric: value at the centre, indicator +1; missing categorical: the extra last level (+1).
    np.testing.assert_allclose(x[[1, 2, 3, 4, 5, 6, 8]], [0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    np.testing.assert_allclose(layout.coordinates[7].grid(), -1 + 2 * np.arange(8) / 7)


def test_decode_clips_and_snaps_out_of_range_coordinates():
    x = np.array([[5.0, -3.0, 0.2, np.nan, -0.2, 0.34, 7.0, -0.99, 0.1]])
    back = decode(x, SCHEMA)
    conform(back, SCHEMA)
    assert back["age"][0] == 120
    assert pd.isna(back["big"][0])  # missing indicator 0.2 > 0
    assert back["income"][0] == (-1e3 + 1e6) / 2  # NaN coordinate -> centre; indicator -0.2: present
    assert back["colour"][0] == "blue"  # 0.34 on a 4-level grid snaps to level 2
    assert back["single"][0] == "only"
    assert back["grade"][0] == 1
    assert back["flag"][0] is True or back["flag"][0] == True  # noqa: E712  (0.1 -> level 1 of 3)
