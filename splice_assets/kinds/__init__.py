"""Column kinds, one module each (``continuous``, ``integer``, ``ordinal``, ``categorical``, ``boolean``), on a small
base (``base.Kind`` and the registry ``kind_of``). See ``base`` for what a kind owns."""

from splice_assets.kinds.base import Kind, drafting_kinds, kind_names, kind_of, register, unregister
from splice_assets.kinds.boolean import Boolean
from splice_assets.kinds.categorical import Categorical
from splice_assets.kinds.continuous import Continuous
from splice_assets.kinds.integer import Integer
from splice_assets.kinds.ordinal import Ordinal

for _kind in (Continuous(), Integer(), Ordinal(), Categorical(), Boolean()):
    register(_kind)

__all__ = ["Kind", "drafting_kinds", "kind_names", "kind_of", "register", "unregister"]
