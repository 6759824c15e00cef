"""A small public schema shared by the tests that fit and sample end to end: one numeric, one categorical and one
ordinal column, none nullable (d = 3)."""

from splice_assets.schema import parse_schema

TOY_SCHEMA = parse_schema({
    "name": "toy", "version": 1, "n_min": 2,
    "columns": [
        {"name": "a", "kind": "continuous", "bounds": [0, 1]},
        {"name": "b", "kind": "categorical", "categories": ["x", "y", "z"]},
        {"name": "c", "kind": "ordinal", "categories": [1, 2, 3, 4, 5]},
    ],
})
