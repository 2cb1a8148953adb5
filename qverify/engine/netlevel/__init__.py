"""The engine at network scale: deciding a `NetworkQuery` layer by layer (numpy, HiGHS).

`decide` (search.py) is the strategy; `exact.real_outputs` the exact rational reading of the
network that REAL-arithmetic confirmations use. See search.py for the pipeline and model.py for
the arithmetic each analysis assumes.
"""

from qverify.engine.netlevel.exact import real_outputs
from qverify.engine.netlevel.model import unsupported_reason
from qverify.engine.netlevel.search import decide

__all__ = ["decide", "real_outputs", "unsupported_reason"]
