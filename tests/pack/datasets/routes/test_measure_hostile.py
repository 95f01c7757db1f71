"""A layout's measurement fields (every layout's record: garage's command, TCP's supervision
flags, ...) on absurd values (issue 23): a value its dtype cannot hold is refused, never cast
to another number. Before, int32 took 1e20 as -2147483648, 2**40 as 0 and 2.5 as 2."""
from __future__ import annotations

import numpy as np
import pytest

from carla_wds.pack.datasets.routes.layout_parts import Field
from carla_wds.pack.datasets.routes.measure import field_value

COMMAND = Field("command", "command", dtype="int32")
ROUTE = Field("route", "route", dtype="int32", shape=(3,), pad=True)


@pytest.mark.parametrize("field, raw", [
    (COMMAND, 1e20), (COMMAND, 2 ** 40), (COMMAND, -(2 ** 31) - 1), (COMMAND, 2.5),
    (ROUTE, [1, 2 ** 40]), (Field("flag", "flag", dtype="uint8"), -1)])
def test_values_the_dtype_cannot_hold_are_refused(field, raw):
    value, reason = field_value(field, raw)
    assert value is None and f"expected {field.dtype} whole numbers" in reason
    # what the dtype holds is kept as it is
    assert field_value(COMMAND, 4)[0] == 4 and field_value(COMMAND, 4.0)[0] == 4
    assert field_value(COMMAND, -(2 ** 31))[0] == -(2 ** 31)
    np.testing.assert_array_equal(field_value(ROUTE, [7, 8])[0], [7, 8, 0, 2])
