"""mqbed emulator: the paired simulator and closed-form models (docs/models.md)."""
