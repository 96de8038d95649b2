"""Package data: the bundled mechanisms and the reference data (read through
:mod:`mbfg.resources`)."""

__all__: list = []
