from preflight import units


def test_gigabytes_per_second_is_decimal():
    assert units.parse_quantity("1.5 GB/s", units.Dimension.BANDWIDTH) == 1.5e9
