"""Fakes: check modules that misbehave on purpose, registered by tests with monkeypatch.setitem(CHECKS, ...),
and ``gpu``, the fake GPU seam (pynvml and torch.cuda) the GPU checks are tested through."""
