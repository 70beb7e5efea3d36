"""mqbed emulator: the paired simulator and closed-form models (MODELS.md)."""
