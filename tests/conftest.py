"""Suite-wide pytest settings."""


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "slow(why): takes minutes by nature (why says what), e.g. compiles the engine afresh; "
        "-m 'not slow' leaves it out")
