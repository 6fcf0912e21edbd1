"""Check modules that misbehave on purpose, registered by tests with monkeypatch.setitem(CHECKS, ...)."""
