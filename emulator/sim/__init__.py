"""SimPy model of a scenario (MODELS.md §1-§4)."""
