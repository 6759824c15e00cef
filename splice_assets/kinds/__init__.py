"""Column kinds, one module each (``continuous``, ``integer``, ``ordinal``, ``categorical``, ``boolean``), on a small
base (``base.Kind`` and the registry ``kind_of``). See ``base`` for what a kind owns. The lowered kinds (``datetime``,
``date``, ``time``, ``id``, and ``text``, which is refused) are held by modelled parts or generated: ``lowered``."""

from splice_assets.kinds.base import Kind, drafting_kinds, kind_names, kind_of, register, unregister
from splice_assets.kinds.boolean import Boolean
from splice_assets.kinds.categorical import Categorical
from splice_assets.kinds.continuous import Continuous
from splice_assets.kinds.identifier import Identifier, Text
from splice_assets.kinds.integer import Integer
from splice_assets.kinds.lowered import register_lowered
from splice_assets.kinds.ordinal import Ordinal
from splice_assets.kinds.temporal import Date, Datetime, Time

for _kind in (Continuous(), Integer(), Ordinal(), Categorical(), Boolean()):
    register(_kind)
for _lowered in (Datetime(), Date(), Time(), Identifier(), Text()):
    register_lowered(_lowered)

__all__ = ["Kind", "drafting_kinds", "kind_names", "kind_of", "register", "unregister"]
