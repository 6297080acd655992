"""Runtime helpers that transforms vendor into target repositories, one module each."""
